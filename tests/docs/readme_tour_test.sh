#!/usr/bin/env bash
# readme_tour_test: the README's "A tour of the CLI" runs as written, line by
# line, with the bundled models (models/), so its commands, flags, paths and
# model names cannot drift from what exists.
#
#   tests/docs/readme_tour_test.sh SOURCE_DIR BUILD_DIR
#
# Changed only to fit a test, nothing else: the server listens on a free
# port (--listen=127.0.0.1:0, HTTP off) instead of the fixed 7400/7401, and
# its address is exported as FCA_SERVER; `fca audit --models=...` gets a
# short timing budget (--timing_repeats=2 --timing_budget_seconds=2) instead
# of the default minute per model. The demo's data split (out/demo/data) is
# replaced by two small, independent texts of docs/.
set -euo pipefail
src=$(cd "${1:?SOURCE_DIR}" && pwd)
build=$(cd "${2:?BUILD_DIR}" && pwd)
work=$(mktemp -d)
server_pid=
# The server is the tour script's child, not this shell's: stopped by its
# id and waited for by polling. The test's own exit status is kept.
cleanup() {
  local status=$?
  if [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT
fail() {
  echo "readme_tour_test: $*" >&2
  exit 1
}

tour=$(sed -n '/^## A tour of the CLI/,/^The same calls/p' "$src/README.md" | sed -n 's/^    //p')
[ "$(printf '%s\n' "$tour" | wc -l)" -ge 8 ] || fail "README.md has no tour of the CLI (an indented block under '## A tour of the CLI')"
printf '%s\n' "$tour" | grep -q '^build/bin/fca-server ' || fail "the tour does not start fca-server"

cd "$work"
ln -s "$src/models" models
mkdir -p build out/demo/data
ln -s "$build/bin" build/bin
head -c 6000 "$src/docs/fca.md" >out/demo/data/eval.txt
head -c 4000 "$src/docs/operator-guide.md" >out/demo/data/calib.txt

# The tour as one script: the server line started in the background on a
# free port, every other line as written.
{
  echo 'set -euo pipefail'
  printf '%s\n' "$tour" | while IFS= read -r line; do
    case $line in
      build/bin/fca-server\ *)
        command=${line%%&*}
        echo "$command --listen=127.0.0.1:0 --http_listen= >server.out 2>server.log &"
        echo 'echo $! >server.pid'
        echo 'for _ in $(seq 600); do grep -q "listening on" server.out 2>/dev/null && break; sleep 0.1; done'
        echo 'export FCA_SERVER=$(sed -n "s/^fca-server: listening on //p" server.out)'
        echo '[ -n "$FCA_SERVER" ] || { cat server.log >&2; exit 1; }'
        ;;
      *'fca audit --models='*)
        printf '%s\n' "$line" | sed 's/\(fca audit --models=[^#]*[^ #]\)/\1 --timing_repeats=2 --timing_budget_seconds=2/'
        ;;
      *) printf '%s\n' "$line" ;;
    esac
  done
} >tour.sh

set +e
bash -x tour.sh >tour.out 2>tour.err  # -x: each line as run, for a failure
status=$?
set -e
[ -f server.pid ] && server_pid=$(cat server.pid)
if [ $status -ne 0 ]; then
  echo "--- tour.sh" >&2
  cat tour.sh >&2
  echo "--- stderr" >&2
  tail -n 40 tour.err >&2
  fail "a line of the README's tour failed (exit $status)"
fi
# What the lines say they do.
grep -q 'featuregate-s1' tour.out || fail "fca models does not list featuregate-s1"
grep -q 'SUCCEEDED' tour.out || fail "no audit SUCCEEDED"
[ -s report.html ] || fail "fca report --save_html wrote no report.html"
[ -s job1.json ] || fail "fca jobs manifest --out wrote no job1.json"
grep -q '^job_id,model,' tour.out || fail "fca results --format=csv printed no CSV header"
echo "readme_tour_test: $(printf '%s\n' "$tour" | wc -l) lines of the README's tour ran"
