#!/usr/bin/env bash
# The test command: set up, build, fuzz the parsers of user-supplied files
# for a bounded time (scripts/fuzz.sh; docs/fuzzing.md), run every test
# (the Slurm e2e test starts a single-node Slurm cluster: slurm-wlm + munge).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only the dashboard's browser test needs Debian's chromium and puppeteer-core.
tests/web/setup.sh
# buf (npm @bufbuild/buf) for the API checks (tests/proto/check_api.sh).
tests/proto/setup.sh
# Only the tests need a Slurm cluster (tests/e2e/slurm_e2e_test.cc starts one).
scripts/slurm_cluster.sh install
# Formatting first: it takes seconds, the build minutes.
scripts/check_format.sh
# Warnings are errors here (FCA_WERROR), not in a user's build.
scripts/build.sh -DFCA_WERROR=ON
# clang-tidy (bugprone, performance) on the torch-free libraries.
scripts/tidy.sh
# clang's -Wthread-safety over the units that hold annotated locks.
scripts/thread_safety.sh
scripts/fuzz.sh "${FCA_FUZZ_SECONDS:-20}"
# The torch-free suites under ASan + UBSan (build-asan/).
scripts/sanitize.sh
ctest --test-dir build --output-on-failure
