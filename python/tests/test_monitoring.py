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
import time
import urllib.request

import yaml

import fca
from conftest import MODEL, SOURCE, SPEC

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


# Labels Prometheus itself attaches to every scraped series (the target's
# `job` and `instance`) and the names it keeps for itself: an exported label
# of one of these names is renamed (exported_job) or overwritten, as
# fca_job_progress's `job` was (every job labelled "fca-server").
PROMETHEUS_LABELS = {"job", "instance"}


def series_labels(text):
    """Every label name on the exposition's series, with the metrics that
    carry it."""
    labels = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$", line)
        assert m, f"not a sample line: {line!r}"
        for label in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"', m.group(2) or ""):
            labels.setdefault(label, set()).add(m.group(1))
    return labels


def grafana_labels(expr):
    """The label names a PromQL expression, a Grafana legend or a
    label_values() query reads: matchers, by/without/on/ignoring lists and
    {{label}} templates."""
    if m := re.fullmatch(r"\s*label_values\(\s*[a-zA-Z_:][a-zA-Z0-9_:]*\s*,\s*(\w+)\s*\)\s*", expr):
        return {m.group(1)}
    names = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", expr))
    e = re.sub(r"\{\{\s*\w+\s*\}\}", "", expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)
    for matchers in re.findall(r"\{([^}]*)\}", e):
        names |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", e):
        names |= {n.strip() for n in grouping.split(",") if n.strip()}
    return names


def test_label_parsers():
    assert series_labels('a{job_id="7",x="a\\"b"} 1\nb 2\n# HELP c x\n') == \
        {"job_id": {"a"}, "x": {"a"}}
    assert grafana_labels('sum by (le, method) (rate(x{instance=~"$instance", code!="OK"}[5m]))') \
        == {"le", "method", "instance", "code"}
    assert grafana_labels("job {{job_id}}") == {"job_id"}
    assert grafana_labels("label_values(fca_jobs, instance)") == {"instance"}


def test_exported_labels_are_not_prometheus_own_and_grafana_reads_only_them(server, client,
                                                                         finished_job):
    # fca_job_progress has a series only while a job runs: a longer job,
    # scraped until its series shows, then cancelled.
    job = client.submit([MODEL], eval="eval.txt", calib="calib.txt", label="labels",
                        **dict(SPEC, max_eval_windows=96, max_calib_windows=48,
                               bootstrap_resamples=1000))
    labels = {}
    try:
        deadline = time.monotonic() + 120
        while "fca_job_progress" not in labels.get("job_id", ()) and time.monotonic() < deadline:
            for label, metrics in series_labels(exposition(server)).items():
                labels.setdefault(label, set()).update(metrics)
            if client.job(job.id).done:
                break
            time.sleep(0.02)
    finally:
        try:
            job.cancel()
        except fca.FailedPrecondition:  # it ended first
            pass
        job.wait(progress=False, raise_on_failure=False)
    for label, metrics in series_labels(exposition(server)).items():
        labels.setdefault(label, set()).update(metrics)
    assert "fca_job_progress" in labels.get("job_id", ()), sorted(labels)
    for label, metrics in labels.items():
        assert label not in PROMETHEUS_LABELS and not label.startswith("__"), \
            f"{sorted(metrics)} export the label {label!r}, which Prometheus keeps for itself"

    # The dashboard reads the labels fca-server exports and the target's
    # `instance` (its server variable); never Prometheus' `job`.
    board = dashboard()
    read = []
    for p in panels(board["panels"]):
        for t in p.get("targets", []):
            read.append(("grafana: " + p["title"], t["expr"]))
            read.append(("grafana legend: " + p["title"], t.get("legendFormat", "")))
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            read.append(("grafana variable " + v["name"], v["query"]["query"]))
    assert any("job_id" in grafana_labels(text) for _, text in read)
    for where, text in read:
        unknown = grafana_labels(text) - set(labels) - {"instance"}
        assert not unknown, f"{where}: reads {sorted(unknown)}, which no series of fca-server has"


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
