#!/usr/bin/env bash
# Gathers what a GPU machine lacks to build fca's engine (FCA_ENGINE_ONLY)
# into one archive: the headers, shared libraries and CMake/pkg-config files
# of the Debian packages below, as installed here (scripts/setup.sh installs
# them), with a manifest. scripts/device/check.sh unpacks it there and builds
# against it with rpaths, so nothing is installed on that machine.
#
#   scripts/device/pack.sh [OUT]        OUT: out/device (ignored by git)
#
# Writes OUT/pack.tar.xz (paths under usr/, as on this machine) and
# OUT/pack-manifest.txt (each package's version, and every file). Static
# libraries are left out but GoogleTest's (Debian ships it static only) and
# gflags' (its CMake config checks that they exist).
# It also carries the demo's corpus, Debian's fortunes, which a GPU machine
# lacks: check.sh splits it (fca-train split) for its whole audit, and the
# bundled models' test reproduces their logged NLLs on it.
# What the pack may cost is checked with the tree by size_check.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/device}

# The engine's dependencies besides libtorch (CMakeLists.txt, FCA_ENGINE_ONLY):
# Abseil; glog, with the gflags and libunwind its CMake config asks for;
# OpenSSL's libcrypto (SHA-256); PCRE2 (the Qwen2 pre-tokenizer); GoogleTest.
packages=(
  libabsl-dev libabsl20220623
  libgoogle-glog-dev libgoogle-glog0v6 libgflags-dev libgflags2.2 libunwind-dev libunwind8
  libssl-dev libssl3
  libpcre2-dev libpcre2-8-0
  libgtest-dev libgmock-dev
  # The demo's corpus (/usr/share/games/fortunes).
  fortunes-min fortunes
)

mkdir -p "$out"
rm -rf "$out/data"  # the corpus split an older pack.sh left; the pack carries the corpus now
list=$(mktemp)
trap 'rm -f "$list"' EXIT
{
  echo "# fca dependency pack: made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME") $(uname -m)"
  echo "# package version"
  for p in "${packages[@]}"; do
    v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) ||
      { echo "pack: $p is not installed (scripts/setup.sh)" >&2; exit 1; }
    echo "$p $v"
  done
} > "$out/pack-manifest.txt"

for p in "${packages[@]}"; do
  dpkg -L "$p"
done | sort -u | while read -r f; do
  # Files and links under /usr only (with a merged /usr, dpkg also lists
  # the link /lib itself); no docs, man pages or lintian overrides.
  { [ -f "$f" ] || [ -L "$f" ]; } || continue
  case $f in
    # glog's config finds libunwind with its own find module, which it
    # looks for under /usr/share/glog/cmake (check.sh points there instead).
    /usr/share/glog/cmake/* | /usr/share/games/fortunes/*) ;;
    /usr/share/* | /usr/bin/*) continue ;;
    /usr/*) ;;
    *) continue ;;
  esac
  case $f in
    # GoogleTest is static only; gflags' CMake config checks that its
    # static libraries exist.
    */libgtest*.a | */libgmock*.a | */libgflags*.a) ;;
    *.a) continue ;;
  esac
  echo "${f#/}"
done > "$list"

echo "# files" >> "$out/pack-manifest.txt"
cat "$list" >> "$out/pack-manifest.txt"
tar -C / --owner=0 --group=0 --numeric-owner -cf - --files-from="$list" |
  xz -T0 -6 > "$out/pack.tar.xz.part"
mv "$out/pack.tar.xz.part" "$out/pack.tar.xz"
echo "pack: $(wc -l < "$list") files from ${#packages[@]} packages, $(stat -c %s "$out/pack.tar.xz") bytes: $out/pack.tar.xz"
