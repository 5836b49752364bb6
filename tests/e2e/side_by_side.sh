#!/usr/bin/env bash
# Runs the test programs given at the same time and fails when any of them
# fails; each one's output is printed whole, one after the other, under its
# name. ctest runs the lease-bound suites this way (tests/e2e/CMakeLists.txt):
# together they use about 1.3 of 2 cores, so neither loads the machine the
# way the other tests would, and their wall times overlap instead of adding
# up at the end of ctest.
#
#   tests/e2e/side_by_side.sh PROGRAM...
set -uo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/fca_side_by_side.XXXXXX")
trap 'rm -rf "$work"' EXIT
pids=()
for ((i = 1; i <= $#; i++)); do
  "${!i}" >"$work/$i.log" 2>&1 &
  pids+=($!)
done
status=0
for ((i = 1; i <= $#; i++)); do
  if wait "${pids[i - 1]}"; then result=passed; else result="FAILED (exit $?)"; status=1; fi
  echo "=== ${!i}: $result"
  cat "$work/$i.log"
done
exit $status
