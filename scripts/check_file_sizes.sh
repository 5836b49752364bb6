#!/usr/bin/env bash
# Keeps the hand-written sources short enough to read (docs/developing.md,
# "File size"): a file over 800 lines fails, and one over 600 must say why on
# one of its first five lines ("Long file: <reason>", in a comment). Generated
# files (first line "// GENERATED") and data are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly max_lines=800 reason_above=600
files=()
while IFS= read -r f; do
  [ -f "$f" ] && files+=("$f")
done < <(git ls-files '*.cc' '*.h' '*.py' '*.js' '*.sh' '*.cmake' '*CMakeLists.txt' '*.css' '*.html')
# One awk over every file: a head, grep and wc per file took seconds.
awk -v max="$max_lines" -v above="$reason_above" '
  function check() {
    if (generated) return
    if (n > max) {
      printf "check_file_sizes: %s has %d lines, more than %d: split it\n", file, n, max > "/dev/stderr"
      failed = 1
    } else if (n > above && !reason) {
      printf "check_file_sizes: %s has %d lines: split it, or say why on one of its first five lines (\047Long file: ...\047)\n", file, n > "/dev/stderr"
      failed = 1
    }
  }
  FNR == 1 {
    if (file != "") check()
    file = FILENAME; n = 0; reason = 0; generated = /^\/\/ GENERATED/
  }
  { n++; if (FNR <= 5 && /Long file: /) reason = 1 }
  END {
    if (file != "") check()
    if (!failed) printf "check_file_sizes: every source within %d lines\n", max
    exit failed
  }' "${files[@]}"
