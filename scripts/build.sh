#!/usr/bin/env bash
# Configures and builds fca into build/ (RelWithDebInfo, ccache, ninja,
# precompiled torch headers: FCA_PCH).
#
#   scripts/build.sh [-DNAME=VALUE ...] [TARGET ...]
#
# Arguments that start with '-' go to CMake, the others are the ninja
# targets to build (with what they need); none builds everything, tests and
# benchmarks included. scripts/demo.sh builds only fca-server, fca and
# fca-train; scripts/test.sh builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=()
targets=()
for arg in "$@"; do
  case $arg in
    -*) cmake_args+=("$arg") ;;
    *) targets+=("$arg") ;;
  esac
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_args[@]}"
# One job per core, as many as the memory holds (scripts/build_jobs.sh).
ninja -C build -j "$(scripts/build_jobs.sh)" "${targets[@]}"
