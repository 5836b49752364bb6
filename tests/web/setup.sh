#!/usr/bin/env bash
# The browser test's set-up (scripts/test.sh runs it): Debian's chromium and
# node, and puppeteer-core from npm (tests/npm.sh) into tests/web/node_modules
# (package-lock.json).
# puppeteer-core downloads no browser; the test drives /usr/bin/chromium.
# Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
missing=()
# curl and openssl: tests/npm.sh fetches npm where the machine has none.
for p in chromium nodejs curl openssl; do
  if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
fi
cd "$here"
../npm.sh ci-once
echo "web test setup: $(chromium --version 2>/dev/null | head -1), puppeteer-core $(node -p "require('./node_modules/puppeteer-core/package.json').version")"
