#!/usr/bin/env bash
# The test command: set up, build, fuzz the parsers of user-supplied files
# for a bounded time (scripts/fuzz.sh; docs/fuzzing.md), run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/fuzz.sh "${FCA_FUZZ_SECONDS:-20}"
ctest --test-dir build --output-on-failure
