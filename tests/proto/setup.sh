#!/usr/bin/env bash
# The API checks' set-up (scripts/test.sh runs it, after tests/web/setup.sh
# has installed node): buf from npm (@bufbuild/buf, whose package carries the
# linux binary; tests/npm.sh) into tests/proto/node_modules, pinned by
# package-lock.json. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
../npm.sh ci-once
echo "proto test setup: buf $(node_modules/.bin/buf --version)"
