#!/usr/bin/env bash
# The main job: set up, build, start fca-server on loopback with the bundled
# models (models/: three FeatureGate seeds and their dense twin, a smaller and
# a larger FeatureGate/dense pair, and a mixture of experts, all trained here
# by fca-train) and a fresh database, upload the evaluation and calibration
# parts of the fortunes corpus, submit one audit of all three seeds with the
# dense twin and every intervention, stream its progress, print the report
# (per model and mean ± sd across seeds), write it as JSON and HTML, audit
# one smaller and one larger FeatureGate model against their own dense twins
# and compare the three sizes side by side, re-audit the seeds' static
# profiles on resamples of the calibration set, audit the mixture of experts
# (olmoe-s1) against its own one-expert twin (olmoe-dense) with every
# intervention (its report has the routing sections), check the server's LIVE NLL against each model's
# training log, and stop the server.
#
# Environment (all optional):
#   FCA_DEMO_OUT       output folder [out/demo]
#   FCA_DEMO_MODELS    model repository [models]
#   FCA_DEMO_WINDOWS   evaluation and calibration windows per model [0 = all];
#                      the training-log check needs all
#   FCA_DEMO_TIMING    timed (model, dense twin) pairs per model, at least [25]
#   FCA_DEMO_TIMING_BUDGET  seconds the adaptive timing may take per model [30]
#   FCA_DEMO_CALIB_RESAMPLES  calibration resamples of the calibration-
#                      uncertainty audit [20]
#   FCA_DEMO_SKIP_BUILD=1 and FCA_SERVER_BIN / FCA_CLI_BIN / FCA_TRAIN_BIN:
#                      use already built binaries (the end-to-end test does)
#
# scripts/record_results.sh then copies what the README quotes into
# docs/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
if [ "${FCA_DEMO_SKIP_BUILD:-0}" != 1 ]; then
  # Only the packages and binaries this script runs; scripts/test.sh
  # installs and builds the rest.
  scripts/setup.sh build
  scripts/build.sh fca-server fca fca-train
fi
server_bin=${FCA_SERVER_BIN:-build/bin/fca-server}
fca=${FCA_CLI_BIN:-build/bin/fca}
train_bin=${FCA_TRAIN_BIN:-build/bin/fca-train}
out=${FCA_DEMO_OUT:-out/demo}
models=${FCA_DEMO_MODELS:-models}
windows=${FCA_DEMO_WINDOWS:-0}
timing=${FCA_DEMO_TIMING:-25}
timing_budget=${FCA_DEMO_TIMING_BUDGET:-30}
calib_resamples=${FCA_DEMO_CALIB_RESAMPLES:-20}
# Which layers need their own coefficients: each profile applied at one
# layer at a time (fca.md "Per-group dependence").
per_layer=static_layer,static_token
seeds=(featuregate-s1 featuregate-s2 featuregate-s3)
# A byte-level mixture of experts in the olmoe layout (8 experts, top 2, no
# renormalisation), trained on the same data and token budget as the seeds,
# and its dense twin: the same olmoe network with one expert of width 512,
# as many MLP parameters per token as the two routed experts of width 256,
# and the same rotary embeddings and norms, so the timing compares routing
# alone. A matched twin (fca.md "A matched twin": the same layers, width,
# heads, vocabulary and window, FLOPs within 25%), so the audit needs no
# --dense_twin_mismatch.
moe=olmoe-s1
moe_twin=olmoe-dense

mkdir -p "$out"
# The same deterministic split the models were trained with: evaluation =
# `fortunes`, calibration = `literature`, neither seen in training.
"$train_bin" split --out="$out/data" 2>"$out/split.log" || { cat "$out/split.log" >&2; exit 1; }

rm -f "$out"/fca.sqlite*
"$server_bin" --models="$models" --db="$out/fca.sqlite" \
  --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 >"$out/server.out" 2>"$out/server.log" &
server_pid=$!
# On any failure: stop the server and wait, so nothing writes the database
# after this script has gone.
trap 'kill -TERM $server_pid 2>/dev/null || true; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q "listening on" "$out/server.out" 2>/dev/null && break
  kill -0 $server_pid 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 0.1
done
address=$(sed -n 's/^fca-server: listening on //p' "$out/server.out")
[ -n "$address" ] || { echo "demo: fca-server did not start; see $out/server.log" >&2; exit 1; }
export FCA_SERVER=$address

"$fca" models
"$fca" datasets upload --name=eval "$out/data/eval.txt"
"$fca" datasets upload --name=calib "$out/data/calib.txt"
job=$("$fca" audit --models="$(IFS=,; echo "${seeds[*]}")" --dense_twin=dense \
  --eval=eval --calib=calib --window=128 --max_eval_windows="$windows" \
  --max_calib_windows="$windows" --timing_repeats="$timing" \
  --timing_budget_seconds="$timing_budget" --per_layer="$per_layer" \
  --save_manifest="$out/manifest.json" --detach)
echo "submitted job $job"
"$fca" watch "$job" | tee "$out/audit.log"
echo
"$fca" report "$job" --save_json="$out/report.json" --save_html="$out/report.html" |
  tee "$out/report.txt"
# What a new user waits for (docs/developing.md, "Measuring CI and the
# first report").
echo "demo: first report after $((SECONDS - start)) s"
"$fca" results --job="$job" --format=csv >"$out/results.csv"

# The size trend: the same audit of one FeatureGate model per size (~0.5M,
# ~2M: the seeds above, ~5M parameters), each timed against its own dense
# twin, compared side by side: does static-profile retention grow with size
# as the paper reports at 76M and 504M?
trend=()
for size in small large; do
  trend_job=$("$fca" audit --models="featuregate-$size" --dense_twin="dense-$size" \
    --eval=eval --calib=calib --window=128 --max_eval_windows="$windows" \
    --max_calib_windows="$windows" --timing_repeats="$timing" \
    --timing_budget_seconds="$timing_budget" --per_layer="$per_layer" --label="size $size" --detach)
  echo "submitted job $trend_job (featuregate-$size)"
  "$fca" watch "$trend_job" >"$out/audit-$size.log"
  trend+=("$trend_job")
done
echo
echo "size trend (jobs ${trend[0]}, $job, ${trend[1]}):"
"$fca" compare "${trend[0]}" "$job" "${trend[1]}" | tee "$out/size_trend.txt"
"$fca" compare "${trend[0]}" "$job" "${trend[1]}" --format=json >"$out/size_trend.json"

# Calibration uncertainty: the static profiles are means over the
# calibration windows, so the penalty also moves with C. Re-estimate them on
# R block resamples of C and replay each (fca.md "Calibration uncertainty").
# Only the headline profile and its retention baseline: R replays each.
calib_job=$("$fca" audit --models="$(IFS=,; echo "${seeds[*]}")" \
  --eval=eval --calib=calib --window=128 --max_eval_windows="$windows" \
  --max_calib_windows="$windows" --timing_repeats=0 \
  --interventions=static_layer,global_mean --calib_resamples="$calib_resamples" \
  --label="calibration resampling" --detach)
echo "submitted job $calib_job (calibration resampling, R = $calib_resamples)"
"$fca" watch "$calib_job" >"$out/audit-calib.log"
"$fca" report "$calib_job" --save_json="$out/calib_report.json" | tee "$out/calib_report.txt"

# The mixture of experts against its dense twin: does its routing
# depend on the input, or would a static per-layer or per-token route do
# (retention of static_layer, static_token), how much of LIVE's top-k choice
# each intervention keeps (topk_agreement, with random_route as the chance
# baseline 1/C(E, k)), and what it runs per token (experts_per_token,
# FLOPs and latency against the dense twin). No --interventions: every one
# that applies to a model with routers, as for the seeds. Its report prints
# these in ROUTING AGREEMENT and ROUTING LOAD; the job's rows (moe_results.csv)
# add the per-site rows for scripts/record_results.sh.
moe_job=$("$fca" audit --models="$moe" --dense_twin="$moe_twin" \
  --eval=eval --calib=calib --window=128 --max_eval_windows="$windows" \
  --max_calib_windows="$windows" --timing_repeats="$timing" \
  --timing_budget_seconds="$timing_budget" --per_layer="$per_layer" \
  --label="mixture of experts" --detach)
echo "submitted job $moe_job ($moe)"
"$fca" watch "$moe_job" >"$out/audit-moe.log"
"$fca" report "$moe_job" --save_json="$out/moe_report.json" | tee "$out/moe_report.txt"
"$fca" results --job="$moe_job" --format=csv >"$out/moe_results.csv"

# The committed weights must give the NLL their training log states (the
# trainer's final evaluation runs every evaluation window through the
# server's loader in float32, as this audit's LIVE pass does).
if [ "$windows" = 0 ]; then
  echo
  echo "training log vs server (LIVE NLL over all evaluation windows, nats/byte):" |
    tee "$out/training_log_check.txt"
  checks=()
  for m in "${seeds[@]}"; do checks+=("$job:$m"); done
  checks+=("${trend[0]}:featuregate-small" "${trend[1]}:featuregate-large" "$moe_job:$moe")
  for check in "${checks[@]}"; do
    m=${check#*:}
    logged=$(sed -n 's/.*"final_eval_nll_nats_per_byte": *\([-0-9.eE+]*\).*/\1/p' \
      "$models/$m/training_log.json")
    served=$("$fca" results --job="${check%%:*}" --model="$m" --intervention=replay --metric=live_nll \
      --format=csv | awk -F, 'NR == 2 { for (i = 1; i <= NF; i++) if (h[i] == "value") print $i }
                              NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i }')
    [ -n "$logged" ] && [ -n "$served" ] ||
      { echo "demo: no logged or served NLL for $m" >&2; exit 1; }
    awk -v m="$m" -v a="$logged" -v b="$served" 'BEGIN {
      d = a - b; if (d < 0) d = -d
      printf "  %-18s log %.6f  server %.6f  |diff| %.1e\n", m, a, b, d
      exit d > 1e-4 }' | tee -a "$out/training_log_check.txt" ||
      { echo "demo: $m does not reproduce its training log" >&2; exit 1; }
  done
fi

kill -TERM $server_pid
wait $server_pid
trap - EXIT
echo
echo "report: $out/report.txt, $out/report.json, $out/report.html; rows: $out/results.csv"
echo "size trend: $out/size_trend.txt, $out/size_trend.json"
echo "calibration uncertainty: $out/calib_report.txt, $out/calib_report.json"
echo "mixture of experts: $out/moe_report.txt, $out/moe_report.json; rows: $out/moe_results.csv"
if [ "$windows" = 0 ]; then echo "training log check: $out/training_log_check.txt"; fi
echo "rerun with: $fca audit --manifest=$out/manifest.json"
echo "demo took $((SECONDS - start)) s"
