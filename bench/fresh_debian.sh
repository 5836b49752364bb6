#!/usr/bin/env bash
# The README's commands on a fresh Debian 12, timed: a minimal Debian 12
# (debootstrap --variant=minbase bookworm: apt and a shell, no compiler, no
# git) gets a clone of this checkout's HEAD, and runs, as root in a chroot,
# the README's main command (scripts/demo.sh: its apt-get, the cold build of
# the three binaries and the demo's audits) or, with --ci, .ci/run (the
# README's test command). Prints the processor, the commit, the packages apt
# installed, when the first report came and the wall time.
#
#   bench/fresh_debian.sh [--ci] [--record]
#
# --record copies the summary to docs/results/fresh_debian_{demo,ci}.txt, or
# to docs/results/$FCA_FRESH_RECORD_AS.txt when set (another processor's
# figures beside these).
# Needs root, debootstrap (apt-get install debootstrap) and Debian's mirror
# (http://deb.debian.org, or $FCA_DEBIAN_MIRROR). The minimal system is
# made once and kept as a tarball ($FCA_FRESH_TAR
# [out/fresh-debian/minbase.tar]); every run unpacks a new root from it
# ($FCA_FRESH_ROOT [out/fresh-debian/root]), so nothing of an earlier run
# (packages, ccache, build) is there. The machine is otherwise as it is (its
# cores, memory and network): run it when nothing else is running.
set -euo pipefail
cd "$(dirname "$0")/.."
what=demo
record=0
for arg in "$@"; do
  case "$arg" in
    --ci) what=ci ;;
    --record) record=1 ;;
    *) echo "usage: $0 [--ci] [--record]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "fresh_debian: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null ||
  { echo "fresh_debian: apt-get install debootstrap first" >&2; exit 2; }
out=out/fresh-debian
tar_file=${FCA_FRESH_TAR:-$out/minbase.tar}
root=${FCA_FRESH_ROOT:-$out/root}
mirror=${FCA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$out"

unmount() {
  for m in dev sys proc; do umount -R "$root/$m" 2>/dev/null || true; done
}
unmount
trap unmount EXIT
if [ ! -f "$tar_file" ]; then
  rm -rf "$root.debootstrap"
  debootstrap --variant=minbase bookworm "$root.debootstrap" "$mirror"
  tar -C "$root.debootstrap" -cf "$tar_file" .
  rm -rf "$root.debootstrap"
fi
# Never remove a root with the host's /proc, /sys or /dev still mounted in it.
if [ -d "$root" ] && grep -q " $(realpath "$root")/" /proc/mounts; then
  echo "fresh_debian: $root still has mounts (see /proc/mounts); unmount them first" >&2
  exit 1
fi
rm -rf --one-file-system "$root" && mkdir -p "$root" && tar -C "$root" -xf "$tar_file"
# --rbind: the cgroup file system under /sys (slurmd needs it) and devpts.
for m in proc sys dev; do mount --rbind "/$m" "$root/$m"; done
# The machine's own network trust goes with it, as it would to any fresh
# machine here: its resolver and host names, its extra CA certificates (an egress proxy's,
# on the development machine; apt's ca-certificates adds them to the
# system's store) and NODE_EXTRA_CA_CERTS (node reads no system store).
cp /etc/resolv.conf /etc/hosts "$root/etc/"  # hosts: the host name (munged looks it up)
if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
git clone -q . "$root/root/fca"
commit=$(git -C "$root/root/fca" rev-parse --short HEAD)

command=scripts/demo.sh
[ "$what" = ci ] && command=.ci/run
log=$out/$what.log
echo "fresh_debian: $command of $commit on a fresh Debian 12 (log: $log)"
start=$SECONDS
rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive CI=true \
  ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=$NODE_EXTRA_CA_CERTS} \
  bash -c "cd /root/fca && $command" >"$log" 2>&1 || rc=$?
wall=$((SECONDS - start))

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
installed=$(grep -h 'newly installed' "$log" | awk '{ n += $3 } END { print n + 0 }')
first=$(sed -n 's/^demo: first report after \([0-9]*\) s$/\1/p' "$log" | head -1)
{
  echo "$command on a fresh Debian 12 (debootstrap minbase bookworm; root, chroot), commit $commit"
  echo "  measured $(date -u +%Y-%m-%d) on $cpu, $(nproc) CPUs, $(free -g | awk '/^Mem:/ { print $2 }') GiB"
  echo "  apt installed $installed packages (apt-get lines of the log)"
  [ -n "$first" ] && echo "  first report after $first s (apt, cold build and the first audit; target <= 480 s)"
  echo "  wall $wall s, exit status $rc"
  # scripts/test.sh's own account of each step (wall and CPU seconds).
  grep '^test.sh: ' "$log" | sed 's/^/  /' || true
} | tee "$out/$what-summary.txt"
if [ "$record" = 1 ] && [ "$rc" = 0 ]; then
  recorded=docs/results/${FCA_FRESH_RECORD_AS:-fresh_debian_$what}.txt
  cp "$out/$what-summary.txt" "$recorded"
  echo "fresh_debian: $recorded written"
fi
exit "$rc"
