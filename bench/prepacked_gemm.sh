#!/usr/bin/env bash
# The engine's GEMM calls against weights packed once (fca_prepacked_gemm_bench,
# whose header says what it measures), at one thread and at one per core, one
# after the other; prints both tables.
#
#   bench/prepacked_gemm.sh            figures in $FCA_PREPACKED_OUT [out/prepacked-gemm]
#   bench/prepacked_gemm.sh --record   also write docs/results/prepacked_gemm.txt
#
# Needs oneDNN's headers at build time (apt-get install libdnnl-dev) and an
# idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/processor.sh
build=${FCA_BUILD_DIR:-build}
out=${FCA_PREPACKED_OUT:-out/prepacked-gemm}
bench="$build/bin/fca_prepacked_gemm_bench"
[ -x "$bench" ] || {
  echo "prepacked_gemm: build it first (apt-get install libdnnl-dev; scripts/build.sh fca_prepacked_gemm_bench)" >&2
  exit 2
}
mkdir -p "$out"
{
  echo "The engine's GEMM call (at::linear) against oneDNN's matmul with the weight packed once"
  echo "  measured $(date -u +%F) on $(processor_line); $(nproc) CPUs"
  for threads in $(printf '%s\n' 1 "$(nproc)" | sort -nu); do
    echo
    "$bench" --threads="$threads" --json="$out/threads-$threads.json"
  done
} | tee "$out/summary.txt"
if [ "${1:-}" = --record ]; then
  cp "$out/summary.txt" docs/results/prepacked_gemm.txt
  echo "prepacked_gemm: wrote docs/results/prepacked_gemm.txt"
fi
