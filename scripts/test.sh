#!/usr/bin/env bash
# The test command: set up, build, fuzz the parsers of user-supplied files
# for a bounded time (scripts/fuzz.sh; docs/fuzzing.md), run every test
# (the Slurm e2e test starts a single-node Slurm cluster: slurm-wlm + munge).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time goes to stderr, so a slow CI run says where it went.
step_start=$SECONDS
step() {
  echo "test.sh: $1 took $((SECONDS - step_start)) s" >&2
  step_start=$SECONDS
}
trap 'echo "test.sh: total $SECONDS s" >&2' EXIT
scripts/setup.sh
step "setup"
# Only the dashboard's browser test needs Debian's chromium and puppeteer-core.
tests/web/setup.sh
step "web setup"
# buf (npm @bufbuild/buf) for the API checks (tests/proto/check_api.sh).
tests/proto/setup.sh
step "buf setup"
# Only the tests need a Slurm cluster (tests/e2e/slurm_e2e_test.cc starts one).
scripts/slurm_cluster.sh install
step "slurm install"
# What a GPU check sends (the tree and the dependency pack) must fit the
# device machine's transfer (docs/developing.md, "Tree size").
scripts/device/pack.sh
scripts/device/size_check.sh
step "device size"
# Formatting first: it takes seconds, the build minutes.
scripts/check_format.sh
scripts/check_file_sizes.sh
step "check_format"
# Warnings are errors here (FCA_WERROR), not in a user's build.
scripts/build.sh -DFCA_WERROR=ON
step "build"
# clang-tidy (bugprone, performance) on the torch-free libraries.
scripts/tidy.sh
step "tidy"
# clang's -Wthread-safety over the units that hold annotated locks.
scripts/thread_safety.sh
step "thread_safety"
scripts/fuzz.sh "${FCA_FUZZ_SECONDS:-20}"
step "fuzz"
# The torch-free suites under ASan + UBSan (build-asan/).
scripts/sanitize.sh
step "sanitize"
ctest --test-dir build --output-on-failure
step "ctest"
