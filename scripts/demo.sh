#!/usr/bin/env bash
# The main job: set up, build, and run a real audit on local models.
#
# Until the trained demo models are bundled, this audits three randomly
# initialised FeatureGate models (controller output std 0.5, so their gates
# vary with the input) and a dense twin, on text from the Debian `fortunes`
# package: evaluation = the `fortunes` file, calibration = `literature`.
# Random weights give NLL near log(256) = 5.55 nats/byte and penalties near
# zero: the numbers show the engine at work, not a finding about trained models.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
out=${FCA_DEMO_OUT:-out/demo}
mkdir -p "$out/models"
for seed in 1 2 3; do
  [ -f "$out/models/featuregate-s$seed/model.safetensors" ] ||
    build/server/fca-local-audit init --family=featuregate --seed=$seed \
      --controller_out_std=0.5 --out="$out/models/featuregate-s$seed"
done
[ -f "$out/models/dense/model.safetensors" ] ||
  build/server/fca-local-audit init --family=dense --seed=1 --out="$out/models/dense"
corpus=/usr/share/games/fortunes
build/server/fca-local-audit audit \
  --models="$out/models/featuregate-s1,$out/models/featuregate-s2,$out/models/featuregate-s3" \
  --dense_twin="$out/models/dense" \
  --eval=$corpus/fortunes --calib=$corpus/literature \
  --window=128 --max_eval_windows=${FCA_DEMO_WINDOWS:-64} --max_calib_windows=${FCA_DEMO_WINDOWS:-64} \
  --threads=0 --json="$out/report.json"
echo "report written to $out/report.json"
