#!/usr/bin/env bash
# The alert rules and the scrape example, checked by Debian's promtool
# (package prometheus; ctest prometheus_rules_test): the rules parse, the
# example configuration is valid, and the unit tests of each alert pass.
# Exit 77 (ctest SKIP_RETURN_CODE) without promtool.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v promtool >/dev/null; then
  echo "prometheus check: SKIP: promtool not found (apt install prometheus)"
  exit 77
fi
promtool check rules fca-alerts.yml
promtool check config prometheus.yml
promtool test rules fca-alerts.test.yml
