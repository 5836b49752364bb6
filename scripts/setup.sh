#!/usr/bin/env bash
# Installs the Debian 12 packages fca builds and runs with. Idempotent.
#
#   scripts/setup.sh           everything: building, running and every check
#                              of scripts/test.sh
#   scripts/setup.sh build     only what configuring, building and running
#                              the binaries need (scripts/demo.sh): on a fresh
#                              Debian 12, 399 packages instead of 566, 342 MB
#                              to download instead of 518 (docs/developing.md,
#                              "Measuring CI and the first report")
#   scripts/setup.sh build-all what building every target needs (scripts/build.sh
#                              with none named: the Python wheel and the oneDNN
#                              bench too); scripts/test.sh installs the rest
#                              while it builds
set -euo pipefail

# What CMake's configure finds and the build and the demo use.
build_packages=(
  build-essential cmake ninja-build ccache git
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libsqlite3-dev libcpp-httplib-dev pkg-config
  libgtest-dev libgmock-dev
  libssl-dev fortunes openssl
  # The bundled weights are committed as *.xz (cmake/bundled_data.cmake).
  xz-utils
  # scripts/device/pack.sh packs these (glog's CMake config asks for both).
  libgflags-dev libunwind-dev
  # PCRE2: the regex split of Qwen2's tokenizer.json pre-tokenizer.
  libpcre2-dev
)

# What the targets beyond the demo's binaries need to build.
build_all_packages=(
  # The wheel (python/pyproject.toml), built offline.
  python3-pip python3-setuptools python3-wheel
  # oneDNN's headers, for bench/prepacked_gemm_bench.cc (libtorch already
  # depends on its library); without them the bench is left out.
  libdnnl-dev
)

# What only the checks and tests of scripts/test.sh need.
test_packages=(
  # The Debian packages (cmake/packaging.cmake): dpkg-shlibdeps, and file,
  # with which CPack finds the binaries to pass to it.
  dpkg-dev file
  # scripts/check_format.sh (the version fixes the formatting), scripts/tidy.sh,
  # scripts/thread_safety.sh.
  clang-format-14 clang-tidy-14 clang-14
  # scripts/fuzz.sh: clang's sanitizer and libFuzzer runtimes (it installs
  # them itself when run alone).
  libclang-rt-14-dev
  # The Python package fca (python/, docs/python.md; grpc_python_plugin is in
  # protobuf-compiler-grpc) and its tests: pytest, the notebook run headless;
  # python3-yaml also reads deploy/'s manifests (ctest: deploy_manifests_test).
  python3-grpcio python3-protobuf python3-numpy python3-pandas python3-tqdm
  python3-pytest python3-nbconvert python3-ipykernel jupyter-nbconvert python3-yaml
  # python_test installs the wheel into a venv (test_wheel.py);
  # report.plot()'s figures.
  python3-venv python3-matplotlib
  # promtool: deploy/prometheus's alert rules are checked and unit-tested.
  prometheus
  # projects_e2e_test drives the HTTP gateway through curl (a minimal Debian
  # 12 has none: bench/fresh_debian.sh --ci).
  curl
)

case "${1:-all}" in
  all) packages=("${build_packages[@]}" "${build_all_packages[@]}" "${test_packages[@]}") ;;
  build) packages=("${build_packages[@]}") ;;
  build-all) packages=("${build_packages[@]}" "${build_all_packages[@]}") ;;
  *) echo "usage: scripts/setup.sh [build | build-all]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
# libopenblas0-pthread would win the BLAS alternative and ignore
# torch::set_num_threads; the OpenMP build must be the one in use.
if dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: warning: libopenblas0-pthread is installed; remove it for correct threading" >&2
fi
