#!/usr/bin/env bash
# Issue 10 benchmark: throughput of six one-model audits submitted at once to
# a real fca-server, in three layouts on this machine:
#   1 worker  x 2 threads   (--workers=1 --threads_per_worker=2)
#   2 workers x 1 thread    (--workers=2 --threads_per_worker=1)
#   2 Slurm tasks x 1 CPU   (--workers=0 --executor=slurm --slurm_max_tasks=2;
#                            a single-node cluster started by
#                            scripts/slurm_cluster.sh, as root)
# Each layout runs the same six jobs (one model each, its own seed) from
# submission to the last job's end; wall time and jobs/minute are printed.
# The coordinator's overhead per task and the time from a worker's death to
# its task running again are build/bin/fca_workers_bench.
#
#   bench/scale_out.sh            # builds what it needs first
#
# Environment: FCA_SCALE_SKIP_BUILD=1 uses build/ as it is; FCA_SCALE_NO_SLURM=1
# skips the Slurm layout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "${FCA_SCALE_SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/build.ninja ] ||
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca-server fca fca-local-audit fca-worker
fi
server=$root/build/bin/fca-server
cli=$root/build/bin/fca
local_audit=$root/build/bin/fca-local-audit
worker=$(find "$root/build" -name fca-worker -type f -perm -u+x | head -n 1)

work=$(mktemp -d /tmp/fca-scale-out.XXXXXX)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -f "$work/cluster/slurm.conf" ] && scripts/slurm_cluster.sh stop "$work/cluster" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# Six models of the same size (d_model 256: a few seconds of audit each on
# one core), different seeds; text datasets of random words.
mkdir -p "$work/models" "$work/data"
for i in 1 2 3 4 5 6; do
  "$local_audit" init --out="$work/models/fg-$i" --seed="$i" --controller_out_std=1.0 \
    --d_model=256 --n_layers=2 --n_heads=4 --n_groups=4 --d_ff=1024 --controller_width=16 \
    --max_seq_len=64 >/dev/null
done
python3 - "$work/data" <<'EOF'
import random, sys
words = "the frozen controller gate model token layer audit replay of and a".split()
for name, seed, size in (("eval", 1, 64 * 48), ("calib", 2, 64 * 32)):
    rng = random.Random(seed)
    text = ""
    while len(text) < size:
        text += rng.choice(words) + " "
    open(f"{sys.argv[1]}/{name}.txt", "w").write(text[:size])
EOF

# Starts fca-server with "$@" and waits for its port.
start_server() {
  local db=$work/$1.sqlite
  shift
  "$server" --models="$work/models" --db="$db" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 "$@" \
    >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/^fca-server: listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/server.out")
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  echo "scale_out: fca-server did not start:" >&2
  cat "$work/server.err" >&2
  exit 1
}

stop_server() {
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# Submits the six jobs at once and waits for them; prints the wall time.
six_audits() {
  local fca=("$cli" "--server=127.0.0.1:$port")
  "${fca[@]}" datasets upload --name=eval "$work/data/eval.txt" >/dev/null
  "${fca[@]}" datasets upload --name=calib "$work/data/calib.txt" >/dev/null
  local start end
  start=$(date +%s.%N)
  for i in 1 2 3 4 5 6; do
    "${fca[@]}" audit --detach --models="fg-$i" --eval=eval --calib=calib --window=64 \
      --batch=4 --bootstrap=200 --timing_repeats=2 --seed="$i" >/dev/null
  done
  for i in 1 2 3 4 5 6; do
    "${fca[@]}" watch "$i" >/dev/null
  done
  end=$(date +%s.%N)
  local states
  states=$("${fca[@]}" jobs list | awk 'NR > 1 { print $2 }' | sort | uniq -c | tr '\n' ' ')
  python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); \
print(f'{s:8.1f} s   {6*60/s:6.1f} jobs/min   ({sys.argv[3].strip()})')" "$start" "$end" "$states"
}

echo "fca scale-out: six one-model audits (d_model 256, 48 eval + 32 calib windows of 64)"
printf '  %-28s' "1 worker x 2 threads"
start_server w1t2 --workers=1 --threads_per_worker=2
six_audits
stop_server
printf '  %-28s' "2 workers x 1 thread"
start_server w2t1 --workers=2 --threads_per_worker=1
six_audits
stop_server
if [ "${FCA_SCALE_NO_SLURM:-0}" != 1 ]; then
  eval "$(scripts/slurm_cluster.sh start "$work/cluster")"
  printf '  %-28s' "2 Slurm tasks x 1 CPU"
  start_server slurm --workers=0 --executor=slurm --slurm_worker="$worker" \
    --slurm_max_tasks=2 --slurm_cpus_per_task=1 --slurm_log_dir="$work/slurm-logs"
  six_audits
  stop_server
fi
