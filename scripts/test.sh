#!/usr/bin/env bash
# The test command: set up, build, run every test, then fuzz the parsers of
# user-supplied files for a bounded time (scripts/fuzz.sh; docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure
scripts/fuzz.sh "${FCA_FUZZ_SECONDS:-20}"
