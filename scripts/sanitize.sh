#!/usr/bin/env bash
# Builds the torch-free test suites with sanitizers and runs them:
#
#   scripts/sanitize.sh          ASan + UBSan (CMakePresets.json "asan"; CI runs this)
#   scripts/sanitize.sh tsan     ThreadSanitizer ("tsan")
#
# Torch-free only: libtorch is not built with the sanitizers, and ASan's
# checks of memory torch allocates would report its code, not ours. The
# suites that link torch run in the normal build (scripts/test.sh).
#
# The presets compile with clang-14, the fuzzers' compiler: it builds these
# suites with the sanitizers in half GCC's time (docs/developing.md,
# "Sanitizers").
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-asan}
suites=(common_test io_test text_test storage_test client_test)
scripts/need_clang.sh
cmake --preset "$preset" >/dev/null
jobs=$(scripts/build_jobs.sh)
cmake --build --preset "$preset" -j "$jobs" --target "${suites[@]}"
regex="^($(IFS='|'; echo "${suites[*]}"))\$"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# Two slots per core (cmake/test_slots.cmake).
ctest --test-dir "build-$preset" --output-on-failure -j "$((2 * jobs))" -R "$regex"
