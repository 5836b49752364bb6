#!/usr/bin/env bash
# The checks that compile and run nothing, one after the other: clang-tidy
# (scripts/tidy.sh), the thread-safety analysis (scripts/thread_safety.sh),
# the sanitizers' build of the torch-free suites (scripts/sanitize.sh) and
# the fuzzers' build (scripts/fuzz.sh). Each says how long it took.
# scripts/test.sh runs this at the lowest priority beside ctest, and runs
# the sanitized suites and the fuzzers after it. Needs a build
# (scripts/build.sh) and the checks' packages (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
check() {
  local t=$SECONDS
  "$@"
  echo "clang_checks: $1 took $((SECONDS - t)) s"
}
check scripts/tidy.sh
check scripts/thread_safety.sh
check scripts/sanitize.sh --build-only
check scripts/fuzz.sh --build-only
