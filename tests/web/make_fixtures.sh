#!/usr/bin/env bash
# Rewrites tests/web/fixtures (the canned responses of mock_server.js) from a
# real fca-server: the jobs of jobs_lib.sh, dumped in the HTTP gateway's JSON
# by fca-web-fixtures, `fca report 1 --save_json` (what the browser test
# compares the job page with) and GetServerInfo (the vocabulary).
#   ninja -C build fca-server fca fca-local-audit fca-web-fixtures
#   tests/web/make_fixtures.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
SERVER_BIN=$build/bin/fca-server
CLI_BIN=$build/bin/fca
LOCAL_AUDIT_BIN=$build/bin/fca-local-audit
WORK=$(mktemp -d)
trap 'kill "${SERVER_PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
# shellcheck source=jobs_lib.sh
. "$here/jobs_lib.sh"
fca_start_server
fca_make_jobs
sleep 3  # some progress of job 3
out=$here/fixtures
rm -rf "$out"
mkdir -p "$out"
"$build/bin/fca-web-fixtures" --server="$GRPC_ADDR" --out="$out" --jobs=1,2,3 \
  --watch_seconds=4
fca_cli report 1 --save_json="$out/report-1.json" >/dev/null
fca_cli results --job=1 --metric=slowdown_verdict >"$out/verdicts-1.txt"
# The vocabulary the dashboard takes its lists and labels from, as the
# gateway serves it.
curl -sf -X POST -d '{}' "http://$HTTP_ADDR/api/v1/GetServerInfo" >"$out/GetServerInfo.json"
fca_cli jobs cancel 3 >/dev/null
echo "fixtures written to $out"
