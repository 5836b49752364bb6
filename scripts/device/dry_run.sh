#!/usr/bin/env bash
# The GPU check's dry run here, on the CPU against Debian's libtorch
# (docs/developing.md, "On a GPU"): scripts/device/check.sh with FCA_DEVICE=cpu,
# in a mount namespace where this machine's own copies of what the pack
# carries are hidden (their headers, CMake configs and find modules, static
# libraries and the fortunes corpus; the shared libraries stay, since cmake,
# mount and the compiler load some of them and a bind mount cannot hide a
# symbolic link, and check.sh's linkage step shows that the programs take the
# pack's), and so are gRPC's, SQLite's and httplib's headers, which the
# engine-only build must not need, and pkg-config's view of the machine. A
# file missing from the pack then fails here, not on a GPU machine. Needs
# root (unshare, mount). scripts/device/chroot_check.sh runs the same check
# against a libtorch 2.x.
#
#   scripts/device/dry_run.sh OUTDIR [BACK]     after scripts/device/pack.sh
#                                               (BACK: as check.sh's)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: scripts/device/dry_run.sh OUTDIR [BACK]" >&2; exit 2; }
[ -f out/device/pack.tar.xz ] || { echo "dry_run: run scripts/device/pack.sh first" >&2; exit 2; }
lib=/usr/lib/x86_64-linux-gnu
hide_dirs=(/usr/include/absl /usr/include/glog /usr/include/gflags /usr/include/gtest
  /usr/include/gmock /usr/include/openssl /usr/include/x86_64-linux-gnu/openssl
  /usr/share/glog /usr/share/games/fortunes
  "$lib/cmake/absl" "$lib/cmake/glog" "$lib/cmake/gflags" "$lib/cmake/GTest"
  /usr/include/grpc /usr/include/grpcpp /usr/include/grpc++ "$lib/cmake/grpc")
hide_files=(/usr/include/pcre2.h /usr/include/sqlite3.h /usr/include/httplib.h
  "$lib/libgtest.a" "$lib/libgtest_main.a" "$lib/libgmock.a" "$lib/libgmock_main.a")
export FCA_DEVICE=${FCA_DEVICE:-cpu} FCA_BUILD_DIR=${FCA_BUILD_DIR:-build-device-dry}
# pkg-config sees none of this machine's packages (FindOpenSSL asks it even
# when told where OpenSSL is), as on a machine without them.
export PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH=
exec unshare --mount --propagation private bash -c '
  set -e
  for d in "${@:2:$1}"; do [ -d "$d" ] && mount -t tmpfs -o ro none "$d"; done
  shift $(($1 + 1))
  while [ "$1" != -- ]; do
    # Regular files only: a bind mount over a link would hide its target.
    if [ -f "$1" ] && [ ! -L "$1" ]; then mount --bind /dev/null "$1"; fi
    shift
  done
  shift
  exec scripts/device/check.sh "$@"
' hide "${#hide_dirs[@]}" "${hide_dirs[@]}" "${hide_files[@]}" -- "$@"
