#!/usr/bin/env bash
# The MUDDPythia-1.4B scale benchmark. Writes a random checkpoint with the
# public model's tensor names, shapes and bfloat16 dtype (2.84 GB, not
# committed) to $FCA_MUDD_DIR [out/muddpythia-1.4b-random] unless it is
# there, then runs fca_checkpoint_bench on it (bfloat16, T = 512). The
# weights' SHA-256 is remembered in $FCA_MUDD_DIR.weights-hash-cache, as
# fca-server remembers it beside its database: the first run hashes the
# 2.84 GB, a run after it (files unchanged) does not. Delete that file to
# time the hashing again.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FCA_MUDD_DIR:-out/muddpythia-1.4b-random}
build=${FCA_BUILD_DIR:-build}
if [ ! -f "$dir/model.safetensors" ]; then
  start=$SECONDS
  "$build/bin/fca-local-audit" init --family=muddpythia --d_model=2048 --n_layers=24 \
    --n_heads=16 --vocab_size=50432 --d_ff=8192 --max_seq_len=2048 \
    --storage_dtype=bfloat16 --seed=1 --out="$dir"
  echo "wrote $dir in $((SECONDS - start)) s ($(du -h "$dir/model.safetensors" | cut -f1))"
fi
"$build/bin/fca_checkpoint_bench" --model="$dir" --seq="${FCA_MUDD_SEQ:-512}" --repeats=5 \
  --weights_hash_cache="$dir.weights-hash-cache" "$@"
