#!/usr/bin/env bash
# npm for the tests' set-ups (tests/web/setup.sh, tests/proto/setup.sh):
# the machine's npm when it has one; else npm's own package from the npm
# registry, pinned by version and checksum and unpacked once under
# ~/.cache/fca, run with the machine's node. Debian's npm package would
# bring 335 node-* packages to a fresh machine for two `npm ci`s: most of
# the browser set-up's 257 s, against 76 s without them (docs/developing.md,
# "Measuring CI and the first report").
#
#   tests/npm.sh ARGS...    as `npm ARGS...`
#   tests/npm.sh ci-once    `npm ci` in the current folder, once per
#                           package-lock.json (node_modules/.fca-lock.sha256
#                           names the one installed)
set -euo pipefail
if [ "${1:-}" = ci-once ]; then
  lock=$(sha256sum package-lock.json | cut -d' ' -f1)
  [ "$(cat node_modules/.fca-lock.sha256 2>/dev/null)" = "$lock" ] && exit 0
  "$0" ci --no-audit --no-fund --loglevel=error
  echo "$lock" >node_modules/.fca-lock.sha256
  exit 0
fi
if command -v npm >/dev/null; then exec npm "$@"; fi
command -v node >/dev/null ||
  { echo "tests/npm.sh: no node here: tests/web/setup.sh installs Debian's nodejs" >&2; exit 1; }
version=10.8.2
integrity=sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w==
dir=${XDG_CACHE_HOME:-$HOME/.cache}/fca/npm-$version
if [ ! -f "$dir/bin/npm-cli.js" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/fca_npm.XXXXXX")
  registry=${npm_config_registry:-https://registry.npmjs.org}
  curl -fsSL --retry 3 -o "$tmp/npm.tgz" "${registry%/}/npm/-/npm-$version.tgz"
  got="sha512-$(openssl dgst -sha512 -binary "$tmp/npm.tgz" | base64 -w0)"
  if [ "$got" != "$integrity" ]; then
    echo "tests/npm.sh: npm-$version.tgz has $got, not $integrity" >&2
    rm -rf "$tmp"
    exit 1
  fi
  tar -xzf "$tmp/npm.tgz" -C "$tmp"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir"
  mv "$tmp/package" "$dir"
  rm -rf "$tmp"
fi
exec node "$dir/bin/npm-cli.js" "$@"
