#!/usr/bin/env bash
# Issue 15 benchmark: what the torchscript family costs against a native
# family on the same model. fca-local-audit audits featuregate-s1 (native)
# and examples/models/featuregate-s1-ts (the same weights in TorchScript),
# alternately, ROUNDS times each, on the corpus split (all evaluation and
# calibration windows, T = 128, all interventions, no timing), and prints
# each audit's wall time, the medians and their ratio, and the largest
# difference between the two models' NLLs (correct replay).
#
#   bench/torchscript_vs_native.sh [ROUNDS]     # default 3; builds what it needs
#
# Environment: FCA_BENCH_SKIP_BUILD=1 uses build/ as it is; FCA_BENCH_THREADS
# [2]; FCA_BENCH_DTYPE float32 | bfloat16 [float32].
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${FCA_BENCH_THREADS:-2}
dtype=${FCA_BENCH_DTYPE:-float32}
if [ "${FCA_BENCH_SKIP_BUILD:-0}" != 1 ]; then
  scripts/build.sh fca-local-audit fca-train >/dev/null
fi
work=$(mktemp -d /tmp/fca-ts-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
build/bin/fca-train split --out="$work/data" 2>/dev/null

# One audit; prints its wall seconds, writes its JSON report to $2.
audit() {
  local start end
  start=$(date +%s.%N)
  build/bin/fca-local-audit audit --models="$1" --eval="$work/data/eval.txt" \
    --calib="$work/data/calib.txt" --window=128 --max_eval_windows=0 --max_calib_windows=0 \
    --timing_repeats=0 --threads="$threads" --dtype="$dtype" --json="$2" >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

native=() ts=()
for r in $(seq "$rounds"); do
  native+=("$(audit models/featuregate-s1 "$work/native.json")")
  ts+=("$(audit examples/models/featuregate-s1-ts "$work/ts.json")")
  echo "round $r: native ${native[-1]} s, torchscript ${ts[-1]} s"
done
python3 - "$work/native.json" "$work/ts.json" "${native[*]}" "${ts[*]}" <<'PY'
import json, statistics, sys
native, ts = (json.load(open(p)) for p in sys.argv[1:3])
tn = statistics.median(map(float, sys.argv[3].split()))
tt = statistics.median(map(float, sys.argv[4].split()))
def nlls(report):
    out = {}
    for row in report["models"][0]["results"]:
        if row["metric"] == "nll" and row.get("value") is not None:
            out[row["intervention"]] = row["value"]
    return out
a, b = nlls(native), nlls(ts)
diff = max(abs(a[k] - b[k]) for k in a)
print(f"median wall: native {tn:.2f} s, torchscript {tt:.2f} s, torchscript/native {tt / tn:.3f}")
print(f"max |NLL difference| over {len(a)} interventions: {diff:.2e}")
PY
