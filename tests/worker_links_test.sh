#!/usr/bin/env bash
# fca-worker runs tasks for a remote coordinator: it must link neither
# SQLite nor the coordinator, the store or the RPC services (the layering of
# docs/architecture.md, "Folders and targets"). Usage: worker_links_test.sh FCA_WORKER
set -euo pipefail
bin=$1
status=0
if readelf -d "$bin" | grep -i sqlite; then
  echo "worker_links_test: $bin needs SQLite" >&2
  status=1
fi
symbols=$(nm -C --defined-only "$bin")
# The server's side; any of it here is a layering break.
if grep -E 'fca::(storage::Store::|jobs::Coordinator::|core::AuditServiceCore::|grpc_server::(AuditServiceImpl|WorkerServiceImpl)::)|sqlite3_' <<<"$symbols"; then
  echo "worker_links_test: $bin links the store, the coordinator or the RPC services" >&2
  status=1
fi
# The check itself: the worker's own code is there to be found.
if ! grep -q 'fca::runtime::Worker::RunTask' <<<"$symbols"; then
  echo "worker_links_test: no fca::runtime::Worker::RunTask in $bin: nm found nothing" >&2
  status=1
fi
exit $status
