#!/usr/bin/env bash
# Issue 13 benchmark: a re-audit from the coefficient cache. A real
# fca-server (a fresh SQLite file, the bundled models) runs the same audit of
# featuregate-s1 twice (every evaluation and calibration window, T = 128, all
# interventions, no timing): the first job records every window's
# coefficients, the second finds them in the cache and skips LIVE (the first
# evaluation batch excepted: it is compared with a fresh recording). Prints
# both jobs' wall times (submit to end, through the CLI), the speed-up and
# the time the second job spent reading the cache (from its job notes).
#
#   bench/reaudit.sh              # builds what it needs first
#
# Environment: FCA_BENCH_SKIP_BUILD=1 uses build/ as it is; FCA_BENCH_THREADS
# threads per worker [2]; FCA_BENCH_DTYPE float32 | bfloat16 [float32].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if [ "${FCA_BENCH_SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/build.ninja ] ||
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca-server fca fca-train
fi
threads=${FCA_BENCH_THREADS:-2}
dtype=${FCA_BENCH_DTYPE:-float32}
work=$(mktemp -d /tmp/fca-reaudit.XXXXXX)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

build/bin/fca-train split --out="$work/data" 2>/dev/null
build/bin/fca-server --models="$root/models" --db="$work/fca.sqlite" --listen=127.0.0.1:0 \
  --http_listen=127.0.0.1:0 --workers=1 --threads_per_worker="$threads" --dtype="$dtype" \
  >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 300); do
  port=$(sed -n 's/^fca-server: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/server.out")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "${port:-}" ] || { echo "reaudit: fca-server did not start" >&2; cat "$work/server.err" >&2; exit 1; }
fca=("$root/build/bin/fca" "--server=127.0.0.1:$port")
"${fca[@]}" datasets upload --name=eval "$work/data/eval.txt" >/dev/null
"${fca[@]}" datasets upload --name=calib "$work/data/calib.txt" >/dev/null

# One audit, submitted and watched to its end; prints its wall seconds and
# leaves its progress (with the job notes) in $work/job-$1.log.
audit() {
  local start end
  start=$(date +%s.%N)
  "${fca[@]}" audit --models=featuregate-s1 --eval=eval --calib=calib --window=128 \
    --timing_repeats=0 >"$work/job-$1.log" 2>&1
  end=$(date +%s.%N)
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$end"
}

first=$(audit 1)
second=$(audit 2)
echo "fca re-audit from the coefficient cache: featuregate-s1, all windows, $dtype, $threads threads"
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  first job (records the cache):  ${first} s"
echo "  second job (reads it):          ${second} s"
python3 - "$first" "$second" "$work/job-2.log" <<'PY'
import re, sys
first, second, log = float(sys.argv[1]), float(sys.argv[2]), open(sys.argv[3]).read()
print(f"  speed-up: {first / second:.2f}x")
for line in log.splitlines():
    if "came from the coefficient cache" in line:
        print("  " + line.strip())
reads = [float(x) for x in re.findall(r"cache reads so far ([0-9.]+) s", log)]
if reads:
    print(f"  cache hit path (reads, thread-seconds): {reads[-1]:.3f} s = "
          f"{100 * reads[-1] / second:.1f}% of the second job's wall time")
PY
