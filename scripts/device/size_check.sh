#!/usr/bin/env bash
# Fails when what a GPU check sends would not fit: the device machine takes
# the checkout's tracked files and the untracked ones git does not ignore,
# plus what the call carries (the dependency pack), 64 MiB at most. The
# budget keeps 4 MiB of that spare, for what a run adds (its logs, a newer
# pack). scripts/test.sh runs this after scripts/device/pack.sh.
#
#   scripts/device/size_check.sh [DIR]    DIR: out/device, what a call carries
#                                         (pack.sh's pack and manifest)
set -euo pipefail
cd "$(dirname "$0")/../.."
readonly budget_mib=60
carried=${1:-out/device}
[ -f "$carried/pack.tar.xz" ] || { echo "size_check: no $carried/pack.tar.xz (run scripts/device/pack.sh)" >&2; exit 2; }

tree_bytes=$(git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
pack_bytes=$(find "$carried" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
total=$((tree_bytes + pack_bytes))
echo "size_check: tree $(mib "$tree_bytes") MiB + carried $(mib "$pack_bytes") MiB ($carried) =" \
  "$(mib "$total") MiB of a $budget_mib MiB budget"
if [ "$total" -gt $((budget_mib * 1048576)) ]; then
  echo "size_check: over budget; the largest tracked files:" >&2
  git ls-files -z | xargs -0 -r stat -c '%s %n' -- 2>/dev/null | sort -n | tail -10 >&2
  exit 1
fi
