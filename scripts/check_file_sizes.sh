#!/usr/bin/env bash
# Keeps the hand-written sources short enough to read (docs/developing.md,
# "File size"): a file over 800 lines fails, and one over 600 must say why on
# one of its first five lines ("Long file: <reason>", in a comment). Generated
# files (first line "// GENERATED") and data are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly max_lines=800 reason_above=600
failed=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  head -1 "$f" | grep -q '^// GENERATED' && continue
  n=$(wc -l < "$f")
  if [ "$n" -gt "$max_lines" ]; then
    echo "check_file_sizes: $f has $n lines, more than $max_lines: split it" >&2
    failed=1
  elif [ "$n" -gt "$reason_above" ] && ! head -5 "$f" | grep -q 'Long file: '; then
    echo "check_file_sizes: $f has $n lines: split it, or say why on one of its first five lines ('Long file: ...')" >&2
    failed=1
  fi
done < <(git ls-files '*.cc' '*.h' '*.py' '*.js' '*.sh' '*.cmake' '*CMakeLists.txt' '*.css' '*.html')
[ "$failed" -eq 0 ] && echo "check_file_sizes: every source within $max_lines lines"
exit "$failed"
