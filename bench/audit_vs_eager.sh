#!/usr/bin/env bash
# fca's whole audit against a PyTorch-eager reference of the same work
# (bench/eager_audit.py, written from docs/fca.md), side by side.
#
#   bench/audit_vs_eager.sh [ROUNDS]        (default 3; runs from anywhere)
#   bench/audit_vs_eager.sh --record [ROUNDS]   also copies what it printed and
#       the summary's JSON to docs/results/audit_vs_eager.{txt,json}
#
# For each dtype (float32, then bfloat16) and each round it runs
#   fca-local-audit audit --models=MODEL --eval=D/eval.txt --calib=D/calib.txt
#     --max_eval_windows=0 --max_calib_windows=0 --timing_repeats=0 --threads=N --dtype=...
# and bench/eager_audit.py on the same data, at N torch threads and (N > 1) at 1
# thread too, alternating the order from round to round, then bench/gemm_limit.py
# (GEMMs of the model's shapes: the FLOP limit of this machine, measured in the run).
# bench/audit_vs_eager_summary.py then prints, per dtype, the medians over rounds:
# audit seconds (in-process, windowing -> report, from each JSON; excludes process
# start and model load) and process wall seconds, the ratio eager/fca (against the
# eager run at N threads, and the faster eager), the audit's nominal FLOPs
# (E x (1 LIVE + 8 replays) + C x 1 LIVE, per token as fca counts them), GFLOP/s,
# the GEMM limit and the % of it, and the cross-check of both reports (deterministic
# NLLs and eta2 within 1e-4 in float32; exit 1 if not).
#
# Why eager at 1 thread too: two OpenMP threads that share 2 busy cores with other
# jobs wait for each other at every parallel region; on this shared machine eager at
# 2 threads ran up to 8x slower than at 1 thread. The faster of the two is the fair
# reference.
#
# It records the processor (lscpu's model name and its avx512*/amx* flags) and the
# OpenBLAS kernels each side runs (fca-local-audit prints its own; OpenBLAS 0.3.21
# does not know processors newer than it and falls back to generic SSE3 kernels,
# which fca replaces with the AVX-512 ones: server/engine/models/torch_util.cc).
# bench/gemm_limit.py runs fca's kernels (OPENBLAS_CORETYPE set to them unless the
# environment sets it), so the limit is that of the code fca runs. To give eager the
# same kernels, run the whole bench with OPENBLAS_CORETYPE=SKYLAKEX exported.
# The summary's per-phase breakdown (LIVE, calibration, each replay, statistics)
# comes from the seconds on fca-local-audit's progress lines.
#
# Before and after in one run: FCA_BENCH_BASELINE=PATH names another
# fca-local-audit (say, main's, copied aside before rebuilding), run in every
# round next to this one (the two adjacent, their order alternating); the
# summary then adds its times, the ratio baseline/fca, its phases, and
# whether the two reports' rows are bitwise the same.
#
# Environment: FCA_BUILD_DIR (build), FCA_BENCH_DATA (out/demo/data; made with
# `fca-train split` when missing), FCA_BENCH_MODEL (models/featuregate-s1),
# FCA_BENCH_THREADS (2), FCA_BENCH_EAGER_THREADS (N,1: the eager runs' thread
# counts), FCA_BENCH_DTYPES (float32,bfloat16), FCA_BENCH_OUT
# (out/bench/audit_vs_eager), PYTHON (a python3 with torch 1.13; default: the
# first of /usr/bin/python3, python3 that imports torch), FCA_BENCH_EAGER_ARGS (more
# flags for eager_audit.py, e.g. --fidelity_check_every=8), FCA_BENCH_RECORD_AS
# (audit_vs_eager: the name --record gives the files in docs/results, so that
# another processor's figures sit beside these). Relative paths are relative
# to the repository root.
#
# Both programs run under the same environment, printed first: glibc malloc
# settings (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
# GLIBC_TUNABLES), OpenMP/OpenBLAS variables and LD_PRELOAD change these timings a lot.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/processor.sh
if [ "${1:-}" = --record ]; then
  # The same run without --record, its output kept (whatever its exit: a
  # cross-check that fails is a result to record too).
  shift
  out=${FCA_BENCH_OUT:-out/bench/audit_vs_eager}
  mkdir -p "$out"
  set +e
  "$0" "$@" | tee "$out/console.txt"
  status=${PIPESTATUS[0]}
  set -e
  as=docs/results/${FCA_BENCH_RECORD_AS:-audit_vs_eager}
  cp "$out/console.txt" "$as.txt"
  cp "$out/summary.json" "$as.json"
  echo "audit_vs_eager: $as.{txt,json} written (exit $status)"
  exit "$status"
fi
rounds=${1:-${FCA_BENCH_ROUNDS:-3}}
build=${FCA_BUILD_DIR:-build}
data=${FCA_BENCH_DATA:-out/demo/data}
model=${FCA_BENCH_MODEL:-models/featuregate-s1}
threads=${FCA_BENCH_THREADS:-2}
if ((threads > 1)); then default_eager=$threads,1; else default_eager=$threads; fi
eager_threads=${FCA_BENCH_EAGER_THREADS:-$default_eager}
dtypes=${FCA_BENCH_DTYPES:-float32,bfloat16}
out=${FCA_BENCH_OUT:-out/bench/audit_vs_eager}
fca=$build/bin/fca-local-audit
baseline=${FCA_BENCH_BASELINE:-}

py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in /usr/bin/python3 python3; do
    if "$c" -c 'import torch' 2>/dev/null; then py=$c; break; fi
  done
fi
[ -n "$py" ] || { echo "no python3 with torch (apt-get install python3-torch, or set PYTHON)" >&2; exit 2; }
[ -x "$fca" ] || { echo "$fca is not built (scripts/build.sh, or set FCA_BUILD_DIR)" >&2; exit 2; }
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "FCA_BENCH_BASELINE=$baseline is not an executable" >&2; exit 2; }
if [ ! -f "$data/eval.txt" ] || [ ! -f "$data/calib.txt" ]; then
  echo "making $data with fca-train split"
  "$build/bin/fca-train" split --out="$data"
fi
mkdir -p "$out"
rm -f "$out"/fca_*.json "$out"/eager_*.json "$out"/gemm_*.json "$out"/*.log "$out"/times.tsv \
  "$out"/fca_binary.tsv "$out"/summary.json

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
load() { sed 's/.*load average/load average/' <<< "$(uptime)"; }
run_fca() {  # dtype round [base]: this build's fca-local-audit, or with "base" the baseline
  local t0 t1 name=fca_$1_$2 bin=$fca who=fca
  if [ "${3:-}" = base ]; then name=fca_base_$1_$2; bin=$baseline; who=fca_base; fi
  t0=$(now)
  if ! "$bin" audit --models="$model" --eval="$data/eval.txt" --calib="$data/calib.txt" \
      --max_eval_windows=0 --max_calib_windows=0 --timing_repeats=0 --threads="$threads" \
      --dtype="$1" --json="$out/$name.json" > "$out/$name.log" 2>&1; then
    tail -5 "$out/$name.log" >&2; echo "fca-local-audit failed (log: $out/$name.log)" >&2
    exit 1
  fi
  t1=$(now)
  [ "$who" = fca ] && echo "$1 $2 $(stat -c %y "$fca" | cut -d. -f1 | tr ' ' T)" >> "$out/fca_binary.tsv"
  echo "$1 $2 $who $(elapsed "$t0" "$t1")" >> "$out/times.tsv"
}
run_eager() {  # dtype round threads
  local t0 t1 name=eager_$1_t$3_$2
  t0=$(now)
  # shellcheck disable=SC2086  # FCA_BENCH_EAGER_ARGS is a list of flags
  if ! "$py" bench/eager_audit.py --model="$model" --eval="$data/eval.txt" \
      --calib="$data/calib.txt" --threads="$3" --dtype="$1" \
      --json="$out/$name.json" ${FCA_BENCH_EAGER_ARGS:-} > "$out/$name.log" 2>&1; then
    tail -5 "$out/$name.log" >&2; echo "eager_audit.py failed (log: $out/$name.log)" >&2
    exit 1
  fi
  t1=$(now)
  echo "$1 $2 eager_t$3 $(elapsed "$t0" "$t1")" >> "$out/times.tsv"
}
audit_seconds() {  # file.json
  "$py" -c 'import json,sys; d=json.load(open(sys.argv[1]))
print("%.2f" % (d["models"][0]["seconds"] if "models" in d else d["audit_seconds"]))' "$1"
}

echo "audit_vs_eager: $(date -u +%FT%TZ), $(uname -n), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), fca at $threads threads, eager at $eager_threads, $rounds round(s)"
echo "fca: $fca ($(stat -c %y "$fca" | cut -d. -f1))${baseline:+; baseline: $baseline ($(stat -c %y "$baseline" | cut -d. -f1))}; python: $py (torch $("$py" -c 'import torch; print(torch.__version__)'))"
echo "processor: $(processor_line)"
eager_blas=$("$py" -c 'import ctypes, torch
try: f = ctypes.CDLL("libblas.so.3").openblas_get_corename; f.restype = ctypes.c_char_p; print(f().decode())
except (OSError, AttributeError): print("not OpenBLAS")')
echo "OpenBLAS kernels: eager $eager_blas; fca's are in each round's line"
echo "eager flags: ${FCA_BENCH_EAGER_ARGS:-(none)}; model: $model; data: $data (eval $(stat -c %s "$data/eval.txt") B, calib $(stat -c %s "$data/calib.txt") B); out: $out"
envs=$(env | grep -E '^(MALLOC_|GLIBC_TUNABLES|LD_PRELOAD|OMP_|GOMP_|KMP_|MKL_|OPENBLAS_|DNNL_|ONEDNN_|TORCH_|ATEN_)' | sort | tr '\n' ' ' || true)
echo "environment (both run under it): ${envs:-none of MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD, OMP_*, GOMP_*, KMP_*, MKL_*, OPENBLAS_*, DNNL_*, ONEDNN_*, TORCH_*, ATEN_* set}"
echo "load before: $(load)"

IFS=, read -r -a dtype_list <<< "$dtypes"
IFS=, read -r -a eager_list <<< "$eager_threads"
for dtype in "${dtype_list[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2 == 1)); then
      run_fca "$dtype" "$r"
      [ -z "$baseline" ] || run_fca "$dtype" "$r" base
      for t in "${eager_list[@]}"; do run_eager "$dtype" "$r" "$t"; done
    else
      for ((i = ${#eager_list[@]} - 1; i >= 0; i--)); do run_eager "$dtype" "$r" "${eager_list[i]}"; done
      [ -z "$baseline" ] || run_fca "$dtype" "$r" base
      run_fca "$dtype" "$r"
    fi
    fca_blas=$(sed -n 's/^BLAS kernels: //p' "$out/fca_${dtype}_$r.log" | head -1)
    env ${fca_blas:+OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$fca_blas}} "$py" bench/gemm_limit.py --model="$model" --dtypes="$dtype" --threads="$threads" \
      --json="$out/gemm_${dtype}_$r.json" > "$out/gemm_${dtype}_$r.log"
    line="[$dtype round $r/$rounds] audit s: fca $(audit_seconds "$out/fca_${dtype}_$r.json")"
    [ -z "$baseline" ] || line+=", baseline $(audit_seconds "$out/fca_base_${dtype}_$r.json")"
    for t in "${eager_list[@]}"; do
      line+=", eager at $t thread(s) $(audit_seconds "$out/eager_${dtype}_t${t}_$r.json")"
    done
    peak=$("$py" -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["dtypes"][sys.argv[2]]["peak_gflops"])' "$out/gemm_${dtype}_$r.json" "$dtype")
    fca_f32=$(sed -n 's/^float32 projections: //p' "$out/fca_${dtype}_$r.log" | head -1)
    echo "$line; GEMM peak $peak GFLOP/s; fca's OpenBLAS kernels ${fca_blas:-?}, float32 projections ${fca_f32:-?}; $(load)"
  done
done

echo "load after: $(load)"
"$py" bench/audit_vs_eager_summary.py "$out" "$dtypes" "$rounds" "$threads" "$eager_threads"
