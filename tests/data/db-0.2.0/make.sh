#!/usr/bin/env bash
# Writes this folder's fca.sqlite with fca 0.2.0 itself (not run by the
# tests, which only read what it wrote): a 0.2.0 fca-server and its CLI,
# built from the release commit b70bbe9 (with e40b628, the Debian Abseil
# build fix that followed it), run two audits on small models:
#   job 1: featuregate-small against its dense twin dense-small, static_layer
#          replayed at one layer at a time (model, layer, site, family,
#          baseline and execution rows);
#   job 2: olmoe-tiny, static_layer replayed at one site at a time (expert
#          shares, top-k agreement per layer, per-site rows).
# Then it saves what the 0.2.0 CLI printed for them: `fca results --format=json`
# and `fca report --save_json`, which old_database_e2e_test compares with
# what today's server serves from the same file.
#
#   git worktree add /tmp/fca-0.2.0 b70bbe9 && cd /tmp/fca-0.2.0 &&
#     git cherry-pick e40b628 && scripts/build.sh fca-server fca
#   tests/data/db-0.2.0/make.sh /tmp/fca-0.2.0
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
old=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/models" "$work/data"
cp -r "$old/models/featuregate-small" "$old/models/dense-small" "$work/models/"
cp -r "$old/tests/data/olmoe-tiny" "$work/models/"
words() {  # bytes, seed
  awk -v n="$1" -v seed="$2" 'BEGIN {
    srand(seed)
    k = split("the of and a to in is was that for it with as his on be at by had not are " \
              "but from or have an they which one you were all her she there would their", w, " ")
    s = ""
    while (length(s) < n) s = s w[int(rand() * k) + 1] (rand() < 0.1 ? ".\n" : " ")
    printf "%s", substr(s, 1, n)
  }'
}
words $((32 * 24)) 1 >"$work/data/eval.txt"
words $((32 * 16)) 2 >"$work/data/calib.txt"
"$old/build/bin/fca-server" --listen=127.0.0.1:0 --models="$work/models" \
  --db="$work/fca.sqlite" --threads=2 >"$work/server.out" 2>"$work/server.err" &
pid=$!
addr=""
for _ in $(seq 600); do
  addr=$(sed -n 's/^fca-server: listening on \([0-9.]*:[0-9]*\)$/\1/p' "$work/server.out")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$work/server.err" >&2; exit 1; }
fca() { "$old/build/bin/fca" --server="$addr" "$@"; }
fca datasets upload --name=eval "$work/data/eval.txt" >/dev/null
fca datasets upload --name=calib "$work/data/calib.txt" >/dev/null
fca audit --models=featuregate-small --dense_twin=dense-small --eval=eval --calib=calib \
  --window=32 --batch=4 --bootstrap=100 --timing_repeats=2 --seed=7 --label=fg-0.2.0 \
  --per_layer=static_layer >"$work/job1.out" 2>&1 || { cat "$work/job1.out" >&2; exit 1; }
fca audit --models=olmoe-tiny --eval=eval --calib=calib --window=32 --batch=4 --bootstrap=100 \
  --timing_repeats=1 --seed=7 --label=moe-0.2.0 --per_layer=static_layer \
  --per_layer_scope=site >"$work/job2.out" 2>&1 || { cat "$work/job2.out" >&2; exit 1; }
for job in 1 2; do
  fca results --job=$job --format=json >"$here/results-$job.json"
  fca report $job --save_json="$here/report-$job.json" >/dev/null
done
kill "$pid"
wait "$pid" || true
# One file, no write-ahead log beside it; committed xz-compressed, as the
# build expands them (cmake/bundled_data.cmake).
sqlite3 "$work/fca.sqlite" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
cp "$work/fca.sqlite" "$here/fca.sqlite"
for f in fca.sqlite results-1.json results-2.json report-1.json report-2.json; do
  xz -9 -f -k "$here/$f"
done
echo "wrote $here/fca.sqlite.xz, results-*.json.xz, report-*.json.xz"
