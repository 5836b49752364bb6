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
# clang-tidy reads a file's command from a compilation database: this one
# has an entry for each source, a batch's sources (cmake/unity.cmake) each
# with the batch's command compiling that source instead
# (scripts/compile_units.sh).
db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
root=$(pwd)
scripts/compile_units.sh | awk -F'\t' -v dir="$root/build" '
  BEGIN { print "[" }
  { command = $1; sub(/ -c [^ ]*$/, " -c " $2, command)
    printf "%s{\"directory\": \"%s\", \"command\": \"%s\", \"file\": \"%s\"}\n",
      (NR > 1 ? "," : ""), dir, command, $2 }
  END { print "]" }' >"$db/compile_commands.json"
# As many at a time as the build (scripts/build_jobs.sh): each is one clang
# process. xargs exits non-zero when any file has a finding.
if printf '%s\0' "${files[@]}" |
  xargs -0 -n 2 -P "$(scripts/build_jobs.sh)" "$clang_tidy" -p "$db" --quiet 2>/dev/null; then
  echo "tidy: ${#files[@]} files clean"
else
  echo "tidy: findings above (.clang-tidy)" >&2
  exit 1
fi
