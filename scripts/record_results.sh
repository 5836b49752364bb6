#!/usr/bin/env bash
# Copies what the README quotes from a full run of scripts/demo.sh into
# docs/results/ (committed), so that the README and the measurement cannot
# drift: docs_test (tests/docs/check_docs.sh) fails while a number in the
# README's results section is missing from these files.
#
#   scripts/demo.sh && scripts/record_results.sh
#
# Environment: FCA_DEMO_OUT, the demo's output folder [out/demo].
set -euo pipefail
cd "$(dirname "$0")/.."
out=${FCA_DEMO_OUT:-out/demo}
dest=docs/results
files=(report.txt report.json size_trend.txt size_trend.json training_log_check.txt
  calib_report.txt calib_report.json moe_report.txt moe_report.json)

for f in "${files[@]}" results.csv moe_results.csv; do
  [ -s "$out/$f" ] || {
    echo "record_results: $out/$f is missing; run scripts/demo.sh (all windows) first" >&2
    exit 1
  }
done
mkdir -p "$dest"
for f in "${files[@]}"; do cp "$out/$f" "$dest/$f"; done
# Every row of the report, rounded as the README quotes it: the rows the
# text report has no column for (block CIs, retention against each baseline,
# lookup-table diagnostics, timing blocks, between-model intervals).
# With the job's rows (results.csv) for the per-site lookup-table rows.
python3 scripts/report_rows.py "$dest/report.json" "$out/results.csv" >"$dest/report_rows.txt"
python3 scripts/report_rows.py "$dest/calib_report.json" >"$dest/calib_report_rows.txt"
python3 scripts/report_rows.py "$dest/moe_report.json" "$out/moe_results.csv" >"$dest/moe_report_rows.txt"
echo "record_results: ${files[*]} copied from $out to $dest/;" \
  "report_rows.txt, calib_report_rows.txt and moe_report_rows.txt written"
echo "record_results: now check the README's results section: ctest -R docs_test"
