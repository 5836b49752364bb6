#!/usr/bin/env bash
# The GPU check's build and checks against a libtorch 2.x, here, on the CPU
# (docs/developing.md, "Both libtorch lines"): scripts/device/check.sh with
# FCA_DEVICE=cpu inside a Debian chroot whose libtorch-dev is another line
# than Debian 12's 1.13: trixie's 2.6 (C++17) or sid's 2.14 (C++20). The
# chroot holds what a GPU machine holds (libtorch with python3's torch, a
# compiler, CMake, ninja, xz) and nothing of fca's other dependencies, so the
# build takes those from the pack as it would there. An API or CMake change
# of the 2.x line then fails here, not on a lent GPU. Needs root, debootstrap
# and Debian's mirror; the first run of a suite downloads about 1 GB.
#
#   scripts/device/chroot_check.sh SUITE OUTDIR      after scripts/device/pack.sh
#
# Environment:
#   FCA_CHROOT_DIR   the chroot (default: out/chroot-SUITE; made when missing,
#                    kept for the next run)
#   FCA_MIRROR       the Debian mirror (default: http://deb.debian.org/debian)
#   FCA_JOBS, FCA_CHECK_STEPS   passed to check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 2 ] || { echo "usage: scripts/device/chroot_check.sh SUITE OUTDIR" >&2; exit 2; }
suite=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
[ -f out/device/pack.tar.xz ] || { echo "chroot_check: run scripts/device/pack.sh first" >&2; exit 2; }
root=$(mkdir -p "${FCA_CHROOT_DIR:-out/chroot-$suite}" && cd "${FCA_CHROOT_DIR:-out/chroot-$suite}" && pwd)

# What a GPU machine has to build with (docs/developing.md, "On a GPU").
packages=cmake,ninja-build,g++,python3,xz-utils,ca-certificates,libtorch-dev,python3-torch
if [ ! -x "$root/usr/bin/cmake" ]; then
  echo "chroot_check: debootstrap $suite into $root ..."
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" \
    "${FCA_MIRROR:-http://deb.debian.org/debian}" > "$out/debootstrap.log" 2>&1 ||
    { tail -20 "$out/debootstrap.log" >&2; exit 1; }
fi

# The checkout as the device tool sends it: tracked and untracked-not-ignored
# files, plus the pack. The build folder stays in the chroot between runs;
# the files are dated now (--touch), so that it rebuilds from these, not
# from a copy edited in the chroot since.
src=$root/src
mkdir -p "$src"
find "$src" -mindepth 1 -maxdepth 1 ! -name 'build-device' -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -T - -cf - 2> /dev/null | tar -x --touch -f - -C "$src"
mkdir -p "$src/out" && cp -r out/device "$src/out/"
chroot "$root" dpkg-query -W libtorch-dev python3-torch g++ cmake > "$out/packages.txt"

# /proc and /dev for the compiler, python and ninja, in a private mount
# namespace that takes them away when the check ends.
rc=0
unshare --mount --propagation private bash -c '
  mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" &&
    exec chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      FCA_DEVICE=cpu FCA_JOBS="$2" FCA_CHECK_STEPS="$3" \
      bash -c "cd /src && scripts/device/check.sh /src/out/check"
' chroot-check "$root" "${FCA_JOBS:-$(nproc)}" \
  "${FCA_CHECK_STEPS:-}" || rc=$?
[ -d "$src/out/check" ] && cp -r "$src/out/check/." "$out/"
# The chroot's versions, after check.sh's summary (docs/results records it).
[ -f "$out/summary.txt" ] && sed 's/^/package /' "$out/packages.txt" >> "$out/summary.txt"
echo "chroot_check: $suite: exit $rc; logs in $out"
exit $rc
