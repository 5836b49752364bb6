#!/usr/bin/env bash
# The main job: set up, build, start fca-server on loopback with a fresh
# database, upload the evaluation and calibration texts, submit one audit of
# three FeatureGate models with a dense twin and every intervention, stream
# its progress and results, save them, and stop the server cleanly.
#
# Until the trained demo models are bundled, the models are randomly
# initialised here (controller output std 0.5, so their gates vary with the
# input); the texts come from the Debian `fortunes` package (evaluation =
# `fortunes`, calibration = `literature`). Random weights give NLL near
# log(256) = 5.55 nats/byte and penalties near zero: the numbers show the
# service at work, not a finding about trained models.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
out=${FCA_DEMO_OUT:-out/demo}
windows=${FCA_DEMO_WINDOWS:-64}
mkdir -p "$out/models"
for seed in 1 2 3; do
  [ -f "$out/models/featuregate-s$seed/model.safetensors" ] ||
    build/server/fca-local-audit init --family=featuregate --seed=$seed \
      --controller_out_std=0.5 --out="$out/models/featuregate-s$seed"
done
[ -f "$out/models/dense/model.safetensors" ] ||
  build/server/fca-local-audit init --family=dense --seed=1 --out="$out/models/dense"

rm -f "$out"/fca.sqlite*
build/server/fca-server --models="$out/models" --db="$out/fca.sqlite" \
  --listen=127.0.0.1:0 >"$out/server.out" 2>"$out/server.log" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "listening on" "$out/server.out" 2>/dev/null && break
  kill -0 $server_pid 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 0.1
done
export FCA_SERVER=$(sed -n 's/.*listening on //p' "$out/server.out")
fca=build/client/fca
corpus=/usr/share/games/fortunes
$fca models
$fca datasets upload --name=eval $corpus/fortunes
$fca datasets upload --name=calib $corpus/literature
$fca audit --models=featuregate-s1,featuregate-s2,featuregate-s3 --dense_twin=dense \
  --eval=eval --calib=calib --window=128 --max_eval_windows=$windows \
  --max_calib_windows=$windows --save_manifest="$out/manifest.json"
$fca results --job=1 --format=json >"$out/results.json"
$fca results --job=1 --format=csv >"$out/results.csv"
kill -TERM $server_pid
wait $server_pid
trap - EXIT
echo "results: $out/results.json, $out/results.csv; rerun with: fca audit --manifest=$out/manifest.json"
