#!/usr/bin/env bash
# docs_test: the README cannot drift from what the demo measured, and no
# document links to a file that is not there.
#
#   tests/docs/check_docs.sh [SOURCE_DIR]
#
# 1. Every number between the README's `<!-- results: begin -->` and
#    `<!-- results: end -->` markers occurs, as a whole number, in one of the
#    files scripts/record_results.sh writes into docs/results/.
# 2. Every relative link in README.md and docs/*.md names an existing file
#    or folder (anchors are not checked).
# 3. Every curl example that sends a body says `Content-Type: application/json`.
set -euo pipefail
src=${1:-$(dirname "$0")/../..}
cd "$src"
status=0
fail() {
  echo "docs_test: $*" >&2
  status=1
}

results=(docs/results/report.txt docs/results/report_rows.txt docs/results/size_trend.txt
  docs/results/training_log_check.txt docs/results/calib_report.txt docs/results/calib_report_rows.txt
  docs/results/moe_report.txt docs/results/moe_report_rows.txt)
for f in "${results[@]}"; do
  [ -s "$f" ] || fail "$f is missing or empty (scripts/record_results.sh writes it)"
done

section=$(sed -n '/<!-- results: begin -->/,/<!-- results: end -->/p' README.md)
[ -n "$section" ] || fail "README.md has no <!-- results: begin --> ... <!-- results: end --> section"
# Link targets and code spans name files, not figures.
numbers=$(printf '%s\n' "$section" | sed -e 's/\]([^)]*)/]/g' -e 's/`[^`]*`//g' |
  grep -oE '[0-9]+(,[0-9]{3})*(\.[0-9]+)?' || true)
count=0
for n in $numbers; do
  count=$((count + 1))
  pattern="(^|[^0-9.,])${n//./\\.}([^0-9]|\\.[^0-9]|,[^0-9]|,?$|\\.$)"
  grep -qE -- "$pattern" "${results[@]}" 2>/dev/null ||
    fail "README.md states $n, which is in none of ${results[*]}"
done
# A section without figures would pass vacuously.
[ "$count" -ge 10 ] || fail "README.md's results section has only $count numbers"

for doc in README.md docs/*.md; do
  dir=$(dirname "$doc")
  # [text](target): relative targets only; strip an anchor.
  while IFS= read -r target; do
    case $target in
      http://* | https://* | mailto:* | '#'*) continue ;;
    esac
    path=${target%%#*}
    [ -e "$dir/$path" ] || fail "$doc links to $target, which does not exist"
  done < <(grep -oE '\]\([^) ]+\)' "$doc" | sed -e 's/^](//' -e 's/)$//')
done

# Every curl example that sends a body (-d) says it is JSON: the gateway
# refuses a state-changing POST without it (415, docs/api.md "JSON over
# HTTP"), and `curl -d` alone sends a form. A command continued with "\"
# is checked whole.
while IFS= read -r example; do
  case $example in
    *" -d "* | *" --data"*)
      case $example in
        *"Content-Type: application/json"*) ;;
        *) fail "a curl example sends a body without -H 'Content-Type: application/json': $example" ;;
      esac
      ;;
  esac
done < <(for doc in README.md docs/*.md deploy/*.md deploy/*/README.md; do
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$doc" | grep -E '^\s*curl ' | sed "s|^|$doc: |" || true
done)

[ $status -eq 0 ] && echo "docs_test: $count figures found in docs/results/, links valid"
exit $status
