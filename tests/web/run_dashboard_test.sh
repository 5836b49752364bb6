#!/usr/bin/env bash
# The dashboard's browser test (ctest: dashboard_test). Builds nothing: it
# takes the built binaries, starts a real fca-server with its HTTP gateway
# (--http_listen) and API keys on, makes tiny models, uploads datasets and
# runs two audits to completion and starts a slow one with the fca CLI
# (tests/web/jobs_lib.sh), writes `fca report 1 --save_json --save_html`
# and the CLI's slowdown verdicts of job 1 (`fca results`); then an admin
# makes project `lab` with alice (writer) and bob (reader), and alice
# submits job 4 there (queued behind the running job 3: the server has one
# worker). Then runs
# dashboard_test.js (headless Debian chromium + puppeteer-core) against the
# server's HTTP address; after it, audits tests/data/olmoe-tiny (a mixture
# of experts) and runs it again on that job's Routing section alone.
# Screenshots go to --out.
#
# A server built without the gateway (no --http_listen flag) cannot serve the
# dashboard: then the test runs against tests/web/mock_server.js and its
# recorded responses instead, and says so loudly.
#
#   tests/web/run_dashboard_test.sh [--build=DIR] [--server=BIN] [--cli=BIN]
#       [--local_audit=BIN] [--out=DIR] [--mock]
# Needs tests/web/setup.sh to have run (chromium, tests/web/node_modules).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../../build
SERVER_BIN="" CLI_BIN="" LOCAL_AUDIT_BIN="" out="" force_mock=0
for arg in "$@"; do
  case $arg in
    --build=*) build=${arg#*=} ;;
    --server=*) SERVER_BIN=${arg#*=} ;;
    --cli=*) CLI_BIN=${arg#*=} ;;
    --local_audit=*) LOCAL_AUDIT_BIN=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --mock) force_mock=1 ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
SERVER_BIN=${SERVER_BIN:-$build/bin/fca-server}
CLI_BIN=${CLI_BIN:-$build/bin/fca}
LOCAL_AUDIT_BIN=${LOCAL_AUDIT_BIN:-$build/bin/fca-local-audit}
out=${out:-$build/web-screenshots}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

for need in node "$CHROMIUM"; do
  command -v "$need" >/dev/null || { echo "dashboard_test: $need missing: run tests/web/setup.sh" >&2; exit 1; }
done
[ -d "$here/node_modules/puppeteer-core" ] ||
  { echo "dashboard_test: puppeteer-core missing: run tests/web/setup.sh" >&2; exit 1; }

WORK=$(mktemp -d)
SERVER_PID="" MOCK_PID=""
cleanup() {
  # Only the processes started here, by their ids.
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$out"
key=dashboard-test-key-0123456789
admin_key=dashboard-test-admin-0123456789
alice_key=dashboard-test-alice-0123456789
bob_key=dashboard-test-bob-0123456789

# Project `lab` (the admin makes it; alice writes, bob reads), alice's
# datasets there, and her job in it, left queued; prints the job's id.
make_lab_job() {
  FCA_TOKEN=$admin_key fca_cli projects create lab >/dev/null
  FCA_TOKEN=$admin_key fca_cli projects add-member lab alice --role=writer >/dev/null
  FCA_TOKEN=$admin_key fca_cli projects add-member lab bob --role=reader >/dev/null
  FCA_TOKEN=$alice_key fca_cli datasets upload --project=lab --name=eval "$WORK/data/eval.txt" >/dev/null
  FCA_TOKEN=$alice_key fca_cli datasets upload --project=lab --name=calib "$WORK/data/calib.txt" >/dev/null
  FCA_TOKEN=$alice_key fca_cli audit --detach --project=lab --models=fg-a --eval=eval --calib=calib \
    --window=16 --batch=4 --bootstrap=50 --seed=7 --label=lab-job
}

# `fca queue` with the real CLI: alice's job waits first in line (job 3's
# one task runs, none waits); the first user sees it only as "other
# projects", neither lab nor alice named.
check_cli_queue() {
  local alice tester
  alice=$(FCA_TOKEN=$alice_key fca_cli queue)
  if ! grep -Eq "^ *$1 +lab +alice +QUEUED +1 +0 +1 +0\$" <<<"$alice"; then
    printf 'dashboard_test: alice'"'"'s fca queue does not show job %s first in line:\n%s\n' "$1" "$alice" >&2
    return 1
  fi
  tester=$(fca_cli queue)
  if grep -Eq 'lab|alice' <<<"$tester" || ! grep -Eq '^\(other projects\) +1 +0 +1 +0$' <<<"$tester"; then
    printf 'dashboard_test: another user'"'"'s fca queue names lab or lacks its row:\n%s\n' "$tester" >&2
    return 1
  fi
  echo "dashboard_test: fca queue places alice's job $1 first, and hides lab from others"
}

# shellcheck source=jobs_lib.sh
. "$here/jobs_lib.sh"
if [ "$force_mock" = 0 ] && [ -x "$SERVER_BIN" ] && fca_server_has_http; then
  printf '# key user role\n%s tester user\n%s root admin\n%s alice user\n%s bob user\n' \
    "$key" "$admin_key" "$alice_key" "$bob_key" >"$WORK/keys.txt"
  chmod 600 "$WORK/keys.txt"
  fca_start_server --auth --api_keys="$WORK/keys.txt"
  export FCA_TOKEN=$key
  fca_make_jobs
  fca_cli report 1 --save_json="$WORK/report-1.json" --save_html="$WORK/report-1.html" >/dev/null
  fca_cli results --job=1 --metric=slowdown_verdict >"$WORK/verdicts-1.txt"
  lab_job=$(make_lab_job)
  check_cli_queue "$lab_job"
  echo "dashboard_test: real fca-server, gRPC $GRPC_ADDR, HTTP $HTTP_ADDR"
  status=0
  node "$here/dashboard_test.js" --url="http://$HTTP_ADDR" --report_json="$WORK/report-1.json" \
    --cli_verdicts="$WORK/verdicts-1.txt" --out="$out" --api_key="$key" --chromium="$CHROMIUM" \
    --reader_key="$bob_key" --lab_job="$lab_job" --report_html="$WORK/report-1.html" || status=$?
  fca_cli jobs cancel 3 >/dev/null 2>&1 || true
  # A mixture of experts' report (issue 24): the one worker is free once
  # job 3 is cancelled and alice's job has run.
  if [ "$status" = 0 ]; then
    cp -r "$here/../data/olmoe-tiny" "$WORK/models/olmoe-tiny"
    moe_job=$(fca_cli audit --detach --models=olmoe-tiny --eval=eval --calib=calib --window=16 \
      --batch=4 --bootstrap=50 --timing_repeats=0 --interventions=static_layer,random_route \
      --seed=9 --label=moe)
    fca_cli watch "$moe_job" >"$WORK/moe.out" 2>&1 || { cat "$WORK/moe.out" >&2; exit 1; }
    # Two seeds audited alike in a job each, for the pooled compare page.
    pool_jobs=""
    for m in fg-a fg-b; do
      pool_jobs+=${pool_jobs:+,}$(fca_cli audit --detach --models=$m --eval=eval --calib=calib \
        --window=16 --batch=4 --bootstrap=50 --timing_repeats=0 --seed=8 --label=pool)
    done
    for j in ${pool_jobs//,/ }; do
      fca_cli watch "$j" >"$WORK/pool.out" 2>&1 || { cat "$WORK/pool.out" >&2; exit 1; }
    done
    node "$here/dashboard_test.js" --url="http://$HTTP_ADDR" --report_json="$WORK/report-1.json" \
      --cli_verdicts="$WORK/verdicts-1.txt" --out="$out" --api_key="$key" --chromium="$CHROMIUM" \
      --routing_job="$moe_job" --pool_jobs="$pool_jobs" || status=$?
  fi
  exit $status
fi

banner() {
  local line='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
  printf '%s\n' "$line" "!! dashboard_test: $1" "!! $2" "!! $3" "$line"
}
if [ "$force_mock" = 1 ]; then
  banner "--mock given: running against tests/web/mock_server.js," \
    "recorded responses (tests/web/fixtures), NOT a real fca-server." ""
else
  banner "$SERVER_BIN has no --http_listen flag (no HTTP gateway):" \
    "running against tests/web/mock_server.js and its recorded responses" \
    "(tests/web/fixtures), NOT against the real server." | tee /dev/stderr
fi
node "$here/mock_server.js" --port=0 --api_key="$key" >"$WORK/mock.out" 2>&1 &
MOCK_PID=$!
addr=""
for _ in $(seq 100); do
  addr=$(sed -n 's/^http listening on \([0-9.]*:[0-9]*\)$/\1/p' "$WORK/mock.out")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$WORK/mock.out" >&2; exit 1; }
node "$here/dashboard_test.js" --url="http://$addr" --report_json="$here/fixtures/report-1.json" \
  --cli_verdicts="$here/fixtures/verdicts-1.txt" --out="$out" --api_key="$key" --chromium="$CHROMIUM"
