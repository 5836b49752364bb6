#!/usr/bin/env bash
# The engine's float32 projections through HostLinear against at::linear
# (fca_host_gemm_bench, whose header says what it measures); prints the table.
#
#   bench/host_gemm.sh            figures in $FCA_HOST_GEMM_OUT [out/host-gemm]
#   bench/host_gemm.sh --record   also write docs/results/host_gemm.txt
#
# FCA_HOST_GEMM_RECORD_AS (host_gemm) names the file --record writes in
# docs/results, so that another processor's figures sit beside these
# (host_gemm_epyc_cooperlake: an AMD EPYC on OpenBLAS's Cooperlake kernels).
# Wants an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/processor.sh
build=${FCA_BUILD_DIR:-build}
out=${FCA_HOST_GEMM_OUT:-out/host-gemm}
bench="$build/bin/fca_host_gemm_bench"
[ -x "$bench" ] || {
  echo "host_gemm: build it first (scripts/build.sh fca_host_gemm_bench)" >&2
  exit 2
}
mkdir -p "$out"
{
  echo "The engine's float32 projections: HostLinear (w column-major, read in place) against at::linear (OpenBLAS)"
  echo "  measured $(date -u +%F) on $(processor_line); $(nproc) CPUs"
  echo
  "$bench"
} | tee "$out/summary.txt"
if [ "${1:-}" = --record ]; then
  as=docs/results/${FCA_HOST_GEMM_RECORD_AS:-host_gemm}.txt
  cp "$out/summary.txt" "$as"
  echo "host_gemm: wrote $as"
fi
