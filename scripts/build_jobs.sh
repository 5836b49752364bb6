#!/usr/bin/env bash
# Prints how many compilers (or clang-tidy, or fuzzers) to run at once: one
# per core, but no more than the memory holds at ~1.5 GB each (a translation
# unit that includes torch takes up to ~1 GB, a torch test's link more).
# FCA_BUILD_JOBS, when set, wins. scripts/build.sh, tidy.sh, thread_safety.sh,
# fuzz.sh and sanitize.sh use it; so does ctest in test.sh and sanitize.sh,
# with two slots per core (cmake/test_slots.cmake).
set -euo pipefail
if [ -n "${FCA_BUILD_JOBS:-}" ]; then
  echo "$FCA_BUILD_JOBS"
  exit 0
fi
cores=$(nproc)
mem_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
by_memory=$((mem_kb / 1500000))
jobs=$((cores < by_memory ? cores : by_memory))
echo $((jobs > 0 ? jobs : 1))
