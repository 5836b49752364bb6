#!/usr/bin/env bash
# Configures and builds fca into build/ (RelWithDebInfo, ccache, ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
# Two jobs: a translation unit including torch takes ~1.4 GB and ~30 s.
ninja -C build -j "${FCA_BUILD_JOBS:-2}"
