#!/usr/bin/env bash
# OLMoE-1B-7B at full size on this machine. Writes a random checkpoint with
# the public model's config keys, tensor names, shapes and bfloat16 dtype
# (6.92B parameters, 13.8 GB in three shards; not committed) to
# $FCA_OLMOE_DIR [out/olmoe-1b-7b-random] unless it is there, then, in one
# run, for each torch thread count in $FCA_OLMOE_THREADS ["1 $(nproc)"],
# $FCA_OLMOE_ROUNDS [3] times:
# fca_checkpoint_bench on it (load time, peak RSS against the weights, LIVE
# and REPLAY tokens/s at T = 512, REPLAY of the recording bitwise LIVE) and
# an eager PyTorch forward of the same folder with as many threads
# (bench/olmoe_1b7b.py, the forward of tests/reference/moe_reference.py),
# then the GEMM floor (only that forward's matrix products, timed alike);
# prints them side by side with the targets and what a 64-window audit
# would take (an estimate). Run it on an idle machine: builds beside it
# slowed both sides 15-20x once.
#
#   bench/olmoe_1b7b.sh            figures in $FCA_OLMOE_OUT [out/olmoe-1b-7b-bench]
#   bench/olmoe_1b7b.sh --record   also copy the summary to docs/results/
#                                  ($FCA_OLMOE_RECORD_AS [olmoe_1b7b_bench].txt:
#                                  another processor's figures beside these)
#
# The GPU line of the estimate reads docs/results/olmoe_1b7b_gpu_eager.json,
# written on a GPU machine by
#   python3 bench/olmoe_1b7b.py eager --random --device=cuda --seq=512 --repeats=5 \
#     --json=docs/results/olmoe_1b7b_gpu_eager.json
# Needs about 16 GB of free memory (one process at a time holds the weights).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FCA_OLMOE_DIR:-out/olmoe-1b-7b-random}
out=${FCA_OLMOE_OUT:-out/olmoe-1b-7b-bench}
build=${FCA_BUILD_DIR:-build}
seq=${FCA_OLMOE_SEQ:-512}
repeats=${FCA_OLMOE_REPEATS:-3}
rounds=${FCA_OLMOE_ROUNDS:-3}
threads=${FCA_OLMOE_THREADS:-$(printf '%s\n' 1 "$(nproc)" | sort -nu | xargs)}  # each in turn
gpu=docs/results/olmoe_1b7b_gpu_eager.json
py=${PYTHON:-/usr/bin/python3}
"$py" -c 'import torch, numpy' 2>/dev/null ||
  { echo "olmoe_1b7b: $py has no torch (apt-get install python3-torch, or set PYTHON)" >&2; exit 2; }
[ -x "$build/bin/fca_checkpoint_bench" ] ||
  { echo "olmoe_1b7b: build fca_checkpoint_bench first (scripts/build.sh fca_checkpoint_bench)" >&2; exit 2; }
mkdir -p "$out"
if [ ! -f "$dir/model.safetensors.index.json" ]; then
  start=$SECONDS
  "$py" bench/olmoe_1b7b.py write "$dir"
  echo "wrote $dir in $((SECONDS - start)) s"
fi
# fca and eager run with the same torch threads, each count in turn: on a
# shared machine a second thread can cost more in OpenMP barriers than it
# gives (the MoE's many small per-expert ops). One process at a time holds
# the weights, so the two cannot run at once: they alternate, $rounds
# rounds, which goes first changing every round, and the ratios are taken
# within a round.
fca_run() {  # threads round
  "$build/bin/fca_checkpoint_bench" --model="$dir" --seq="$seq" --repeats="$repeats" \
    --threads="$1" --weights_hash_cache="$dir.weights-hash-cache" \
    --json="$out/fca-$1-$2.json" | tee "$out/fca-$1-$2.txt"
}
eager_run() {  # threads round
  "$py" bench/olmoe_1b7b.py eager "$dir" --seq="$seq" --repeats="$repeats" --threads="$1" \
    --json="$out/eager-$1-$2.json"
}
gemm_run() {  # threads round
  "$py" bench/olmoe_1b7b.py gemm --seq="$seq" --repeats="$repeats" --threads="$1" \
    --json="$out/gemm-$1-$2.json"
}
pairs=()
gemms=()
for k in $threads; do
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then fca_run "$k" "$r"; eager_run "$k" "$r"
    else eager_run "$k" "$r"; fca_run "$k" "$r"; fi
    gemm_run "$k" "$r"
    pairs+=("$out/fca-$k-$r.json" "$out/eager-$k-$r.json")
    gemms+=(--gemm="$out/gemm-$k-$r.json")
  done
done
"$py" bench/olmoe_1b7b.py summary "${pairs[@]}" "${gemms[@]}" \
  --gpu="$([ -f "$gpu" ] && echo "$gpu")" | tee "$out/summary.txt"
if [ "${1:-}" = --record ]; then
  as=docs/results/${FCA_OLMOE_RECORD_AS:-olmoe_1b7b_bench}.txt
  cp "$out/summary.txt" "$as"
  echo "olmoe_1b7b: $as written"
fi
