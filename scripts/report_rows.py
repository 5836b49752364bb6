#!/usr/bin/env python3
"""Every row of a saved `fca report --save_json` file as text, rounded as the
README quotes it, so that docs_test can find the README's figures for rows the
text report has no column for (penalty_block, retention_vs.<baseline>,
eta2_token, the timing blocks, the between-model intervals); with the job's
`fca results --format=csv` also its per-site lookup-table rows (lookup_table,
site_eta2_token, site_eta2_token_position and their _oos rows), which GetReport
leaves out.

    scripts/report_rows.py REPORT_JSON [RESULTS_CSV] > rows.txt

Values: percent rows (unit %) with 1 decimal; slowdowns as percent with 1
decimal; nats/token signed with 4 decimals; other values with 4 decimals and
4 significant digits. Across-model rows: mean ± sd, min..max and the
t-interval [ci_low, ci_high] over the models.
"""
import csv
import json
import sys

SITE_METRICS = ("lookup_table.", "site_eta2_token.", "site_eta2_token_position.",
                "site_eta2_token_oos.", "site_eta2_token_position_oos.")


def fmt(metric, unit, v):
    if v is None:
        return "undefined"
    if unit == "%":
        return "%.1f" % v
    if metric.startswith("slowdown") and metric != "slowdown_verdict":
        return "%+.1f%%" % (100 * v)
    if unit == "nats/token":
        return "%+.4f" % v
    return "%.4f (%.4g)" % (v, v)


def interval(metric, unit, row):
    if row.get("ci_low") is None or row.get("ci_high") is None:
        return ""
    return " [%s, %s]" % (fmt(metric, unit, row["ci_low"]), fmt(metric, unit, row["ci_high"]))


def main():
    # A GetReport message (fca's one JSON): metrics[] of (intervention,
    # metric, unit), each with its per-model rows and the across-model row.
    with open(sys.argv[1], encoding="utf-8") as f:
        report = json.load(f)
    print("ROWS of job %s (model, intervention/metric, value [CI], n)" % report.get("job", {}).get("id"))
    metrics = report.get("metrics", [])
    for model in report.get("models", []):
        for m in metrics:
            for r in m.get("per_model", []):
                if r["model"] != model:
                    continue
                name, u = m["metric"], m.get("unit", "")
                value = r.get("value") if r.get("defined") else None
                print("%-16s %-44s %s%s  n=%s" % (model, m["intervention"] + "/" + name,
                                                  fmt(name, u, value), interval(name, u, r), r.get("n")))
    print()
    print("ACROSS MODELS (intervention/metric: mean ± sd (min..max) [t-interval over the models], models)")
    for m in metrics:
        a = m.get("across_models")
        if not a:
            continue
        name, u = m["metric"], m.get("unit", "")
        label = m["intervention"] + "/" + name
        if int(a.get("n", 0)) == 0:
            print("%-44s undefined (%s undefined)" % (label, a.get("undefined")))
            continue
        print("%-44s %s ± %s (%s..%s)%s  models=%s undefined=%s" % (
            label, fmt(name, u, a["mean"]), fmt(name, u, a["sd"]).lstrip("+"),
            fmt(name, u, a["min"]), fmt(name, u, a["max"]), interval(name, u, a), a.get("n"),
            a.get("undefined")))
    if len(sys.argv) > 2:
        print()
        print("SITE ROWS (model, variation/metric.<site>, value, n)")
        with open(sys.argv[2], encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                if r["intervention"] != "variation" or not r["metric"].startswith(SITE_METRICS):
                    continue
                value = "undefined" if r["defined"] != "true" else fmt(r["metric"], "1", float(r["value"]))
                print("%-16s %-44s %s  n=%s" % (r["model"], "variation/" + r["metric"], value, r["n"]))


if __name__ == "__main__":
    main()
