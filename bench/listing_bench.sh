#!/usr/bin/env bash
# Issue 23 benchmark: per-page latency of every listing RPC (ListDatasets,
# ListJobs with its filters, QueryResults, QueryAuditLog, ListApiKeys,
# ListProjects, ListWebhooks) through a real server over an aged database of
# 100k jobs (with events and result rows) and 100k datasets over several
# projects, thinned by a retention pass and deletions
# (bench/listing_bench.cc). Target: under 20 ms a page. Records the output
# in docs/results/listing_bench.txt.
#
#   bench/listing_bench.sh              # builds what it needs first
#
# Environment: FCA_BENCH_JOBS, FCA_BENCH_DATASETS [100000 each];
# FCA_BENCH_DIR the folder for the database [a fresh one under /tmp,
# removed]; FCA_BENCH_SKIP_BUILD=1 uses build/ as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${FCA_BENCH_SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/build.ninja ] ||
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca_listing_bench
fi
args=(--jobs="${FCA_BENCH_JOBS:-100000}" --datasets="${FCA_BENCH_DATASETS:-100000}")
[ -n "${FCA_BENCH_DIR:-}" ] && args+=(--dir="$FCA_BENCH_DIR")
mkdir -p docs/results
{
  echo "# bench/listing_bench.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD)"
  echo "# $(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
  build/bin/fca_listing_bench "${args[@]}"
} | tee docs/results/listing_bench.txt
