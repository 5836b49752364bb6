#!/usr/bin/env bash
# Checks that the C++ sources git tracks follow .clang-format (Google style,
# 100 columns), with Debian 12's clang-format 14 (another version formats
# some constructs differently). Generated files (first line "// GENERATED")
# are left as their generator writes them.
#
#   scripts/check_format.sh          list the files that differ; exit 1 if any
#   scripts/check_format.sh --fix    reformat them in place
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format-14}
command -v "$clang_format" >/dev/null || {
  echo "check_format: $clang_format not found (apt-get install clang-format-14)" >&2
  exit 2
}
files=()
while IFS= read -r f; do
  head -n 1 "$f" | grep -q '^// GENERATED' || files+=("$f")
done < <(git ls-files '*.cc' '*.h')

if [ "${1:-}" = --fix ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format: not formatted (scripts/check_format.sh --fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
