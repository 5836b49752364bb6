#!/usr/bin/env bash
# clang-tidy 14 (.clang-tidy: bugprone, performance; findings are errors) on
# the torch-free libraries' sources, or on the FILES given. Needs a build
# (build/compile_commands.json; scripts/build.sh writes it).
#
#   scripts/tidy.sh                 common/, storage/, client/, server/engine/{io,text}/
#   scripts/tidy.sh FILE.cc ...     those files
#
# Torch units are left out by default: clang parses the torch headers again
# for every one of them (GCC's precompiled header is not clang's), minutes each.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_tidy=${CLANG_TIDY:-clang-tidy-14}
command -v "$clang_tidy" >/dev/null || {
  echo "tidy: $clang_tidy not found (apt-get install clang-tidy-14)" >&2
  exit 2
}
[ -f build/compile_commands.json ] || { echo "tidy: build first (scripts/build.sh)" >&2; exit 2; }
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  while IFS= read -r f; do
    head -n 1 "$f" | grep -q '^// GENERATED' || files+=("$f")
  done < <(git ls-files 'common/*.cc' 'storage/*.cc' 'client/*.cc' 'server/engine/io/*.cc' \
    'server/engine/text/*.cc')
fi
# The units to check: each file's own, or the batch it compiles in
# (cmake/unity.cmake; scripts/compile_units.sh), which is then checked once
# for all its sources, at about a fifth of the time of one run per source
# (the CLI's 22 files: 32 CPU s against 145). .clang-tidy's header filter
# takes in the .cc files a batch includes; bugprone-suspicious-include,
# which flags an included .cc file, is left out for a batch.
root=$(pwd)
declare -A wanted=()
for f in "${files[@]}"; do wanted[$(realpath -m "$f")]=1; done
declare -A found=() plain=() batches=()
while IFS=$'\t' read -r command file; do
  [ -n "${wanted[$file]:-}" ] || continue
  found[$file]=1
  unit=${command##* -c }  # the command's input: the source, or its batch
  if [ "$unit" = "$file" ]; then plain[$unit]=1; else batches[$unit]=1; fi
done < <(scripts/compile_units.sh)
for f in "${!wanted[@]}"; do
  [ -n "${found[$f]:-}" ] || { echo "tidy: ${f#"$root"/} is not a source in build/compile_commands.json" >&2; exit 2; }
done
# As many at a time as the build (scripts/build_jobs.sh): each is one clang
# process. xargs exits non-zero when any file has a finding.
# (printf of no argument would still print one empty one.)
# GCC's own flags in the compile commands (--param=ggc-min-heapsize,
# CMakeLists.txt) mean nothing to clang, which would say so in a warning
# that .clang-tidy makes an error.
tidy=("$clang_tidy" -p build --quiet --extra-arg=-Wno-unused-command-line-argument)
status=0
[ ${#plain[@]} -eq 0 ] || printf '%s\0' "${!plain[@]}" |
  xargs -0 -n 2 -P "$(scripts/build_jobs.sh)" "${tidy[@]}" 2>/dev/null || status=1
[ ${#batches[@]} -eq 0 ] || printf '%s\0' "${!batches[@]}" |
  xargs -0 -n 1 -P "$(scripts/build_jobs.sh)" "${tidy[@]}" \
    --checks=-bugprone-suspicious-include 2>/dev/null || status=1
if [ $status -eq 0 ]; then
  echo "tidy: ${#files[@]} files clean (${#plain[@]} units of their own, ${#batches[@]} batches)"
else
  echo "tidy: findings above (.clang-tidy)" >&2
  exit 1
fi
