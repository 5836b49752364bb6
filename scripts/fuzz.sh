#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan + UBSan) into build-fuzz/
# and runs each for SECONDS_PER_TARGET (default 30). Exit 1 when any fuzzer
# crashes, times out or runs out of memory; the input is kept under
# build-fuzz/artifacts/<target>/. See docs/fuzzing.md.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
#   FCA_FUZZ_TARGETS="json unicode"  only these targets
#   FCA_FUZZ_JOBS=1                  fuzzers run at once (default: one per core,
#                                    as many as the memory holds: scripts/build_jobs.sh)
#
# Each fuzzer grows a scratch corpus in build-fuzz/corpus/<target>, seeded
# from fuzz/corpus/<target> and fuzz/regressions/<target>; nothing is written
# into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
jobs="${FCA_FUZZ_JOBS:-$(scripts/build_jobs.sh)}"
targets=(${FCA_FUZZ_TARGETS:-json safetensors safetensors_index tokenizer_json bpe_encode unicode model_config})
build=build-fuzz

scripts/need_clang.sh

start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DFCA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
ninja -C "$build" -j "$(scripts/build_jobs.sh)" $(printf '%s_fuzzer ' "${targets[@]}")
echo "fuzz: built in $(( $(date +%s) - start )) s; ${seconds} s per target, ${jobs} at once"

# Runs one fuzzer; its log goes to build-fuzz/logs/<target>.log and its
# exit status to <target>.rc.
run_one() {
  local t="$1"
  local corpus="$build/corpus/$t" artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  rm -f "$artifacts"/*
  for seeds in "fuzz/corpus/$t" "fuzz/regressions/$t"; do
    [ -d "$seeds" ] && cp -r "$seeds/." "$corpus/"
  done
  local dict=()
  [ -f "fuzz/dicts/$t.dict" ] && dict=(-dict="fuzz/dicts/$t.dict")
  "$build/bin/${t}_fuzzer" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 \
    >"$build/logs/$t.log" 2>&1 && echo 0 >"$build/logs/$t.rc" || echo $? >"$build/logs/$t.rc"
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  rm -f "$build/logs/$t.rc"
  run_one "$t" &
done
wait

failed=()
for t in "${targets[@]}"; do
  if [ "$(cat "$build/logs/$t.rc" 2>/dev/null)" = 0 ]; then
    # The last status line: runs, coverage, features, corpus, speed.
    summary=$(grep -E '^#[0-9]+' "$build/logs/$t.log" | tail -1 || true)
    echo "fuzz: $t ok: $summary"
  else
    failed+=("$t")
    echo "fuzz: $t FAILED (log: $build/logs/$t.log)" >&2
    grep -E 'ERROR: |FUZZ_CHECK failed|runtime error' "$build/logs/$t.log" | head -5 >&2 || true
    for input in "$build/artifacts/$t"/*; do
      [ -e "$input" ] || continue
      echo "fuzz:   input: $input  (keep it: cp it to fuzz/regressions/$t/)" >&2
    done
  fi
done
echo "fuzz: done in $(( $(date +%s) - start )) s"
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: failures in: ${failed[*]}" >&2; exit 1; }
