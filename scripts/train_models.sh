#!/usr/bin/env bash
# Retrains the bundled models from scratch into models/ (or $FCA_MODELS_OUT):
# featuregate-s1, featuregate-s2, featuregate-s3 and their dense twin (same
# width and depth, seed 1), then the size trend: featuregate-small /
# dense-small (~0.5M parameters) and featuregate-large / dense-large (~5M),
# seed 1 each, then the mixture of experts olmoe-s1 and its dense twin
# olmoe-dense; byte-level, on the
# Debian `fortunes` corpus
# (evaluation file `fortunes`, calibration file `literature`, training = every
# other file; `fca-train split` prints the full rule). Prints the time each
# model took. Each writes config.json, model.safetensors (bfloat16) and
# training_log.json, and model.safetensors.xz, the copy git keeps.
#
# Settings: d_model 192, 4 layers, 6 heads, d_ff 768, G = 8, controller width
# 64, T = 128; AdamW (lr 3e-3, 200 warm-up steps, cosine to 3e-4, weight decay
# 0.1, clip 1.0), 4000 steps of 16 windows (8.2 M tokens), bfloat16 compute
# with float32 master weights, 2 torch threads. Measured on an idle 2-core
# machine: ~15-16k tokens/s for featuregate (~9 min per model) and ~20k for
# dense (~7 min). A busy machine is much slower: train on an idle one.
#
# The size trend keeps depth, G, T, the data and the token budget (8.2 M
# tokens) and scales the width (d_ff = 4 d_model, controller width about
# d_model / 3, head width 24-64) and the peak learning rate down with it (4e-3
# at d_model 96, 3e-3 at 192, 2e-3 at 320; the floor stays a tenth of the
# peak). The large pair is ~2.7x the seeds, not more, so that the whole
# set trains in about two hours on 2 cores.
#
# The mixture of experts olmoe-s1 (Hugging Face's olmoe layout: 8 SwiGLU
# experts of width 256, top 2 without renormalisation, load-balancing loss
# 0.01, seed 1) keeps the seeds' width, depth, heads, data, token budget and
# optimiser; its two routed experts per token hold 2 x 3 x 192 x 256 MLP
# parameters, as many as the dense twin's 2 x 192 x 768. Its matched dense
# twin olmoe-dense is the same olmoe network with one expert of width 512
# (top 1: Hugging Face's router then gives it weight exactly 1, a dense SwiGLU
# MLP with the two routed experts' parameters), trained alike with no
# load-balancing loss (constant with one expert) and two threads (no
# per-expert operators to wait on). It shares rotary embeddings, RMS norms
# and q/k norms with olmoe-s1, which `dense` does not, so the execution audit
# compares routing alone (fca.md "A matched twin").
#
# `--only=seeds`, `--only=sizes`, `--only=moe` or `--only=moe-twin` trains one
# group.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${FCA_TRAIN:-build/bin/fca-train}
out=${FCA_MODELS_OUT:-models}
if [ ! -x "$bin" ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  ninja -C build -j "${FCA_BUILD_JOBS:-2}" fca-train
fi

common=(
  --corpus=/usr/share/games/fortunes --eval_files=fortunes --calib_files=literature
  --d_model=192 --n_layers=4 --n_heads=6 --d_ff=768 --n_groups=8 --controller_width=64
  --window=128 --batch=16 --steps=4000 --warmup=200 --lr=3e-3 --min_lr=3e-4
  --weight_decay=0.1 --grad_clip=1.0 --log_interval=50 --eval_interval=250 --eval_windows=64
  --compute_dtype=bfloat16 --storage_dtype=bfloat16 --threads=2
)

train() {
  local name=$1
  shift
  rm -rf "${out:?}/$name"
  local start=$SECONDS
  "$bin" train "${common[@]}" "$@" --out="$out/$name"
  echo "== $name: $((SECONDS - start)) s"
  # What is committed is the compressed copy (cmake/bundled_data.cmake); the
  # filter settings suit 2-byte bfloat16 weights (about 0.67 of the size).
  xz -k -f -T2 --lzma2=preset=9e,lc=1,lp=1,pb=1 "$out/$name/model.safetensors"
}

only=all
case "${1:-}" in
  "") ;;
  --only=seeds | --only=sizes | --only=moe | --only=moe-twin) only=${1#--only=} ;;
  *) echo "usage: $0 [--only=seeds|--only=sizes|--only=moe|--only=moe-twin]" >&2; exit 2 ;;
esac

# Later flags override the common ones.
small=(--d_model=96 --n_heads=4 --d_ff=384 --controller_width=32 --lr=4e-3 --min_lr=4e-4)
large=(--d_model=320 --n_heads=5 --d_ff=1280 --controller_width=96 --lr=2e-3 --min_lr=2e-4)
# One torch thread for the MoE: its many small per-expert operators spend
# their time in OpenMP barriers with two threads on a busy 2-core machine
# (3,056 against 705 tokens/s over 20 steps, side by side). The weights
# depend on the thread count, so olmoe-s1 reproduces with one.
moe=(--d_model=192 --n_layers=4 --n_heads=6 --num_experts=8 --experts_per_token=2
  --expert_width=256 --aux_loss_coef=0.01 --threads=1)

mkdir -p "$out"
total=$SECONDS
if [ "$only" = all ] || [ "$only" = seeds ]; then
  train featuregate-s1 --family=featuregate --seed=1
  train featuregate-s2 --family=featuregate --seed=2
  train featuregate-s3 --family=featuregate --seed=3
  train dense --family=dense --seed=1
fi
if [ "$only" = all ] || [ "$only" = sizes ]; then
  train featuregate-small --family=featuregate --seed=1 "${small[@]}"
  train dense-small --family=dense --seed=1 "${small[@]}"
  train featuregate-large --family=featuregate --seed=1 "${large[@]}"
  train dense-large --family=dense --seed=1 "${large[@]}"
fi
if [ "$only" = all ] || [ "$only" = moe ]; then
  train olmoe-s1 --family=olmoe --seed=1 "${moe[@]}"
fi
if [ "$only" = all ] || [ "$only" = moe-twin ]; then
  train olmoe-dense --family=olmoe --seed=1 "${moe[@]}" --num_experts=1 --experts_per_token=1 \
    --expert_width=512 --aux_loss_coef=0 --threads=2
fi
echo "== all: $((SECONDS - total)) s"
du -ch "$out"/* | tail -1
