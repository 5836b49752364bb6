#!/usr/bin/env bash
# Installs clang-14 and its sanitizer and libFuzzer runtimes when they are
# missing (scripts/fuzz.sh, scripts/sanitize.sh; CI's set-up installs them
# with the checks' packages: scripts/setup.sh). Idempotent like setup.sh.
set -euo pipefail
missing=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
