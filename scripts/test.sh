#!/usr/bin/env bash
# The test command: set up, build, fuzz the parsers of user-supplied files
# for a bounded time (scripts/fuzz.sh; docs/fuzzing.md), run every test
# (the Slurm e2e test starts a single-node Slurm cluster: slurm-wlm + munge).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time goes to stderr, so a slow CI run says where it went,
# with the CPU seconds its processes used (user + system), which other work
# on a shared machine does not inflate as it does the wall time.
times_file=$(mktemp "${TMPDIR:-/tmp}/fca_test_times.XXXXXX")
# Sets cpu: the CPU seconds of the processes this shell has waited for. Not
# in $(...): a subshell's `times` counts none of them.
children_cpu() {
  times >"$times_file"
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
                       printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$times_file")
}
step_start=$SECONDS
step_cpu=0
step() {
  children_cpu
  echo "test.sh: $1 took $((SECONDS - step_start)) s (CPU $((cpu - step_cpu)) s)" >&2
  step_start=$SECONDS
  step_cpu=$cpu
}
# The marker the background set-up leaves when the checks' packages are in
# (below).
packages_ready=$(mktemp -u "${TMPDIR:-/tmp}/fca_test_packages.XXXXXX")
trap 'children_cpu; echo "test.sh: total $SECONDS s (CPU $cpu s)" >&2
      rm -f "$times_file" "$packages_ready"' EXIT
# What the build needs first; the rest installs in the background while it
# compiles (below).
scripts/setup.sh build-all
step "setup"

# What only the checks and tests need downloads and installs in the
# background while the build compiles (on a fresh machine: ~170 Debian
# packages, then chromium's, and npm's own package: tests/npm.sh): one after the
# other, for the package manager's lock; each says how long it took. The
# checks after the build wait for the first part ($packages_ready).
tests_setup() {
  local t=$SECONDS
  # clang-format, clang-tidy, clang (fuzzing), Python's test modules.
  scripts/setup.sh
  echo "test.sh: test packages took $((SECONDS - t)) s (background)" >&2
  touch "$packages_ready"
  t=$SECONDS
  # Only the dashboard's browser test needs Debian's chromium and puppeteer-core.
  tests/web/setup.sh
  echo "test.sh: web setup took $((SECONDS - t)) s (background)" >&2
  t=$SECONDS
  # buf (npm @bufbuild/buf) for the API checks (tests/proto/check_api.sh).
  tests/proto/setup.sh
  echo "test.sh: buf setup took $((SECONDS - t)) s (background)" >&2
  t=$SECONDS
  # Only the tests need a Slurm cluster (tests/e2e/slurm_e2e_test.cc starts one).
  scripts/slurm_cluster.sh install
  echo "test.sh: slurm install took $((SECONDS - t)) s (background)" >&2
}
tests_setup_log=$(mktemp "${TMPDIR:-/tmp}/fca_tests_setup.XXXXXX")
tests_setup >"$tests_setup_log" 2>&1 &
tests_setup_pid=$!
# What a GPU check sends (the tree and the dependency pack) must fit the
# device machine's transfer (docs/developing.md, "Tree size").
scripts/device/pack.sh
scripts/device/size_check.sh
step "device size"
# Warnings are errors here (FCA_WERROR), not in a user's build.
scripts/build.sh -DFCA_WERROR=ON
step "build"
# The checks below need the test packages.
until [ -e "$packages_ready" ]; do
  # Ended without the marker (checked again: it may have come just now).
  if ! kill -0 "$tests_setup_pid" 2>/dev/null && [ ! -e "$packages_ready" ]; then
    cat "$tests_setup_log" >&2
    echo "test.sh: the test packages' set-up failed (above)" >&2
    exit 1
  fi
  sleep 1
done
step "waiting for the test packages"
scripts/check_format.sh
scripts/check_file_sizes.sh
step "check_format"
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
if ! wait $tests_setup_pid; then
  cat "$tests_setup_log" >&2
  echo "test.sh: the tests' set-up failed (above)" >&2
  exit 1
fi
cat "$tests_setup_log" >&2
rm -f "$tests_setup_log"
step "waiting for the tests' set-up"
# Two slots per core (scripts/build_jobs.sh): a busy test takes both, one
# that mostly waits one (cmake/test_slots.cmake); the ones that cannot share
# the machine say so (RUN_SERIAL, RESOURCE_LOCK in tests/**/CMakeLists.txt:
# docs/developing.md, "Test").
ctest --test-dir build --output-on-failure -j "$((2 * $(scripts/build_jobs.sh)))"
step "ctest"
