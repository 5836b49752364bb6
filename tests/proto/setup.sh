#!/usr/bin/env bash
# The API checks' set-up (scripts/test.sh runs it, after tests/web/setup.sh
# has installed node): buf from npm (@bufbuild/buf, whose package carries the
# linux binary; tests/npm.sh) into tests/proto/node_modules, pinned by
# package-lock.json. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
# Installed once per lock file: node_modules/.fca-lock.sha256 names it.
lock=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.fca-lock.sha256 2>/dev/null)" != "$lock" ]; then
  ../npm.sh ci --no-audit --no-fund --loglevel=error
  echo "$lock" >node_modules/.fca-lock.sha256
fi
echo "proto test setup: buf $(node_modules/.bin/buf --version)"
