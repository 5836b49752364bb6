"""Issue 25 item 4 against the real server (conftest.py): the Grafana
dashboard (deploy/grafana) is valid JSON whose every PromQL names only
metrics this server exports, as do the alert rules (deploy/prometheus); a
finished job's lifecycle is in the log and in the counters, its progress
series gone; the database's file system is measured.

The one home of the names is the server's own exposition: GET /metrics,
whose families all exist (HELP and TYPE) before any of them has a series.
"""

import json
import re
import urllib.request

import yaml

from conftest import SOURCE

FUNCTIONS_AND_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "e",
}


def exposition(server):
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=30) as r:
        return r.read().decode()


def exported_names(text):
    """Every sample name the exposition's families allow: a histogram's
    _bucket, _sum and _count, a counter's or gauge's own name."""
    names = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = m.groups()
        names.add(name)
        if kind in ("histogram", "summary"):
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def metric_names(expr):
    """The metric names a PromQL expression (or Grafana label_values()) reads."""
    if m := re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,.*\)\s*", expr, re.S):
        return {m.group(1)}
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # strings
    e = re.sub(r"\{[^}]*\}", "", e)                          # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                         # ranges, $__rate_interval
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\w+", " ", e)                             # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in FUNCTIONS_AND_KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_names_parser():
    assert metric_names('histogram_quantile(0.95, sum by (le, method) '
                        '(rate(fca_grpc_request_duration_seconds_bucket{code!="OK"}[$__rate_interval])))') \
        == {"fca_grpc_request_duration_seconds_bucket"}
    assert metric_names('a > 0 and ignoring(state) increase(b_total[15m]) == 0') == {"a", "b_total"}
    assert metric_names("label_values(fca_jobs, instance)") == {"fca_jobs"}
    assert metric_names("x / y < 0.10") == {"x", "y"}


def dashboard():
    return json.loads((SOURCE / "deploy" / "grafana" / "fca-server.json").read_text())


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def test_dashboard_covers_what_operators_watch():
    titles = " | ".join(p["title"].lower() for p in panels(dashboard()["panels"]))
    for topic in ("jobs by state", "progress", "queue wait", "run time", "throughput",
                  "cache hit rate", "grpc latency", "grpc errors", "workers", "tasks lost",
                  "file system"):
        assert topic in titles, topic


def test_dashboard_and_rules_name_only_exported_metrics(server, finished_job):
    exported = exported_names(exposition(server))
    assert {"fca_jobs", "fca_job_progress", "fca_forward_tokens_total"} <= exported
    exprs = []
    board = dashboard()
    for p in panels(board["panels"]):
        for t in p.get("targets", []):
            exprs.append(("grafana: " + p["title"], t["expr"]))
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            exprs.append(("grafana variable " + v["name"], v["query"]["query"]))
    rules = yaml.safe_load((SOURCE / "deploy" / "prometheus" / "fca-alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            exprs.append(("alert " + rule["alert"], rule["expr"]))
    assert len(exprs) > 25
    for where, expr in exprs:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        # `up` is Prometheus's own record of each scrape.
        unknown = names - exported - {"up"}
        assert not unknown, f"{where}: {sorted(unknown)} not exported by fca-server"


def sample(text, series):
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_finished_job_in_the_counters_and_the_log(server, finished_job):
    text = exposition(server)
    job = finished_job.id
    assert sample(text, f'fca_job_progress{{job_id="{job}"}}') is None  # gone with the job
    assert sample(text, "fca_jobs_submitted_total") >= 1
    assert sample(text, "fca_jobs_started_total") >= 1
    assert sample(text, 'fca_jobs_ended_total{state="succeeded"}') >= 1
    assert sample(text, "fca_tasks_lost_total") == 0
    assert sample(text, 'fca_forward_tokens_total{model="featuregate-small"}') > 0
    avail = sample(text, "fca_store_filesystem_avail_bytes")
    size = sample(text, "fca_store_filesystem_size_bytes")
    assert 0 < avail <= size

    log = server.log_text()
    assert re.search(rf"job {job}: submitted by alice\n", log), log
    assert re.search(rf"job {job}: started \(user alice, queued [0-9.]+ s, attempt 1\)", log)
    assert re.search(rf"job {job}: task \d+ \(model featuregate-small, user alice, worker local/0, "
                     rf"attempt 1\) ended SUCCEEDED after [0-9.]+ s", log)
    assert re.search(rf"job {job}: ended SUCCEEDED \(user alice, queued [0-9.]+ s, ran [0-9.]+ s\)",
                     log)
