#!/usr/bin/env bash
# Issue 23 benchmark: an online backup of a ~1 GiB store database while a
# writer commits small transactions (bench/backup_bench.cc). Prints the
# backup's copy and check times and the writer's commit latency alone and
# during the backup (the longest writer stall), and records the output in
# docs/results/backup.txt.
#
#   bench/backup_bench.sh              # builds what it needs first
#
# Environment: FCA_BENCH_MB database size in MiB [1024]; FCA_BENCH_DIR the
# folder for the database and its copy [a fresh one under /tmp, removed];
# FCA_BENCH_SKIP_BUILD=1 uses build/ as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FCA_BENCH_SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/build.ninja ] ||
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca_backup_bench
fi
args=(--mb="${FCA_BENCH_MB:-1024}")
[ -n "${FCA_BENCH_DIR:-}" ] && args+=(--dir="$FCA_BENCH_DIR")
mkdir -p docs/results
{
  echo "# bench/backup_bench.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD)"
  echo "# $(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB;" \
    "file system: $(df -T "${FCA_BENCH_DIR:-/tmp}" | awk 'NR==2 {print $2}')"
  build/bin/fca_backup_bench "${args[@]}"
} | tee docs/results/backup.txt
