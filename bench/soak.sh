#!/usr/bin/env bash
# Soak test of a real fca-server: builds what it needs and runs
# fca_soak_bench (DURATION_S seconds of CLIENTS client threads calling every
# RPC as users of three projects whose memberships cross, probing the
# projects they may not see; prints the per-RPC table, jobs, the probes and
# each project's jobs against what was stored, server RSS/threads, SIGTERM
# exit and SQLite integrity). Exits non-zero when the soak found a problem.
#
#   bench/soak.sh [DURATION_S [CLIENTS]]     # defaults: 600 s, 50 clients
#
# Environment: FCA_SOAK_OUT, folder for soak.txt and soak.json [out/soak];
# FCA_SOAK_SKIP_BUILD=1 uses build/ as it is; FCA_BUILD_JOBS [2]. Extra
# fca_soak_bench flags can follow the two numbers (e.g. --think_ms=20).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
clients=${2:-50}
shift $(( $# < 2 ? $# : 2 ))
out=${FCA_SOAK_OUT:-out/soak}

if [ "${FCA_SOAK_SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/build.ninja ] ||
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  # Only the three targets: a torch translation unit costs ~30 s and 1.4 GB.
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca_soak_bench fca-server fca-local-audit
fi
command -v sqlite3 >/dev/null ||
  echo "soak: no sqlite3 CLI; the integrity check is skipped (apt-get install sqlite3)" >&2

mkdir -p "$out"
status=0
build/bin/fca_soak_bench --duration_s="$duration" --clients="$clients" \
  --json="$out/soak.json" "$@" | tee "$out/soak.txt" || status=$?
echo "soak: table in $out/soak.txt, figures in $out/soak.json (exit $status)"
exit $status
