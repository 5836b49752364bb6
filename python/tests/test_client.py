"""fca.Client against a real fca-server (conftest.py): listings, uploads,
typed errors, results and reports as DataFrames with every zero kept,
re-attaching to a job, comparisons, exported coefficients."""

import csv
import io
import math
import subprocess
import sys

import numpy as np
import pytest

import fca
from conftest import MODEL, OTHER_TOKEN, SPEC, TOKEN, TWIN, Server
from fca.v1 import audit_service_pb2 as pb


def field_names(descriptor):
    return [f.name for f in descriptor.fields]


def test_client_takes_server_and_token_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("FCA_SERVER", server.address)
    monkeypatch.setenv("FCA_TOKEN", TOKEN)
    with fca.Client() as c:
        assert c.server == server.address
        assert set(c.models().name) >= {MODEL, TWIN}
    monkeypatch.delenv("FCA_SERVER")
    assert fca.Client().server == "127.0.0.1:7400"


def test_models_frame_has_every_field(client):
    models = client.models()
    assert list(models.columns) == field_names(pb.Model.DESCRIPTOR) + ["state", "reason"]
    assert set(models.state) == {"READY"}  # the bundled models all serve
    twin = models.set_index("name").loc[TWIN]
    assert twin.family == "dense" and twin.sites == []
    gated = models.set_index("name").loc[MODEL]
    # The first site is at layer 0: a zero that proto3 leaves off the wire.
    assert min(s["layer"] for s in gated.sites) == 0


def test_upload_deduplicates_and_lists(client, datasets):
    again = client.upload(datasets / "eval.txt")
    assert again["deduplicated"] is True and again["name"] == "eval.txt"
    listed = client.datasets()
    assert {"eval.txt", "calib.txt"} <= set(listed.name)
    assert (listed.size_bytes > 0).all()


def test_errors_are_typed(server, client, finished_job):
    with pytest.raises(fca.Unauthenticated):
        fca.Client(server.address, token="").models()
    with pytest.raises(fca.Unauthenticated):
        fca.Client(server.address, token="not-a-key").models()
    with pytest.raises(fca.NotFound) as e:
        client.submit(["no-such-model"], eval="eval.txt", calib="calib.txt")
    assert isinstance(e.value, LookupError) and "no-such-model" in str(e.value)
    with pytest.raises(fca.InvalidArgument):
        client.submit([MODEL], eval="eval.txt", calib="calib.txt", window_length=100000)
    with pytest.raises(TypeError, match="window"):
        client.submit([MODEL], eval="eval.txt", calib="calib.txt", window=32)
    # Another user's job does not exist for bob.
    with pytest.raises(fca.NotFound):
        fca.Client(server.address, token=OTHER_TOKEN).job(finished_job.id)
    with pytest.raises(fca.FailedPrecondition):
        finished_job.cancel()
    with pytest.raises(fca.Unavailable):
        fca.Client("127.0.0.1:1", token=TOKEN, timeout=5).models()


def test_job_is_reattached_by_id(client, finished_job):
    again = client.job(finished_job.id)
    assert again.state == "SUCCEEDED" and again.done and again.progress == 1.0
    assert list(again.message.spec.models) == [MODEL]
    assert again.message.spec.window_length == SPEC["window_length"]
    jobs = client.jobs(label="pytest")
    assert finished_job.id in set(jobs.id)
    # Enums print by their short names and are taken in either spelling.
    assert set(jobs.state) == {"SUCCEEDED"}
    for state in ("SUCCEEDED", "succeeded", "JOB_STATE_SUCCEEDED"):
        assert finished_job.id in set(client.jobs(state=state, label="pytest").id), state
    assert finished_job.id not in set(client.jobs(state="FAILED", label="pytest").id)
    with pytest.raises(ValueError, match="QUEUED, RUNNING"):
        client.jobs(state="done")


def cli_rows(server, job_id):
    text = server.cli("results", f"--job={job_id}", "--format=csv")
    return list(csv.DictReader(io.StringIO(text)))


def number(text):
    return math.nan if text == "" else float(text)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_results_equal_the_cli_csv(server, finished_job):
    df = finished_job.results()
    rows = cli_rows(server, finished_job.id)
    assert len(df) == len(rows) > 0
    for (_, got), want in zip(df.iterrows(), rows):
        assert (got.model, got.intervention, got.metric) == \
            (want["model"], want["intervention"], want["metric"])
        assert got.job_id == int(want["job_id"]) and got.n == int(want["n"])
        assert got.defined == (want["defined"] == "true")
        for column in ("value", "ci_low", "ci_high"):
            assert same(float(got[column]), number(want[column])), (column, got, want)


def test_every_zero_is_kept(finished_job, client):
    df = finished_job.results()
    # Result's fields, its typed key in columns of its own where `key` is.
    want = field_names(pb.Result.DESCRIPTOR)
    at = want.index("key")
    want[at:at + 1] = ["key_metric", "scope"] + [
        f for f in field_names(pb.ResultKey.DESCRIPTOR) if f not in ("metric", "scope")]
    assert list(df.columns) == want
    layer_rows = df[df.scope == "layer"]
    assert len(layer_rows) > 0 and 0 in set(layer_rows.layer)
    assert df.n.dtype.kind == "i" and df.job_id.dtype.kind == "i"
    report = client.report(finished_job)
    sites = report.sites
    assert list(sites.columns) == field_names(pb.SiteRow.DESCRIPTOR)
    assert 0 in set(sites.layer)
    across = report.across_models
    # One model: n 1, no undefined, sd 0 (the proto's definition), each a
    # zero proto3 does not send.
    defined = across[across.n == 1]
    assert len(defined) > 0
    assert (defined.undefined == 0).all() and (defined.sd == 0.0).all()
    assert not defined[["n", "undefined", "mean", "sd", "min", "max"]].isna().any().any()


def test_report_tables(client, finished_job):
    report = client.report(finished_job)
    assert report.models == [MODEL]
    metrics = report.metrics
    penalty = metrics[(metrics.metric == "penalty") & (metrics.intervention == "cross_input")]
    assert len(penalty) == 1 and penalty.iloc[0].unit == "nats/token"
    # Across one model, the mean is that model's value.
    across = report.across_models.set_index(["intervention", "metric"])
    assert across.loc[("cross_input", "penalty"), "mean"] == penalty.iloc[0].value
    # The per-layer rows of cross_input: one per layer of the model.
    layers = metrics[metrics.key_metric == "layer_penalty"]
    num_layers = client.models().set_index("name").loc[MODEL].num_layers
    assert len(layers) == num_layers
    assert sorted(layers.layer) == list(range(num_layers))
    assert (layers.metric == "layer_penalty." + layers.layer.astype(int).astype(str)).all()
    # A keyed metric pivots by its key: (intervention, layer) x models.
    by_layer = report.pivot("layer_penalty")
    assert by_layer.loc[("cross_input", 0), MODEL] == \
        layers[(layers.intervention == "cross_input") & (layers.layer == 0)].iloc[0].value
    pivot = report.pivot("penalty")
    assert pivot.loc["cross_input", MODEL] == penalty.iloc[0].value
    assert len(report.dense_twin) > 0 or report.message.dense_twin == ""
    html = report._repr_html_()
    assert "<table" in html and "penalty" in html and MODEL in html


def test_compare(client, finished_job):
    comparison = client.compare([finished_job, finished_job.id])
    assert [r.job.id for r in comparison.reports] == [finished_job.id] * 2
    metrics = comparison.metrics
    assert metrics.columns[0] == "job" and set(metrics.job) == {finished_job.id}
    assert len(metrics) == 2 * len(client.report(finished_job).metrics)
    assert "<table" in comparison._repr_html_()


def test_job_html(finished_job):
    html = finished_job._repr_html_()
    assert "SUCCEEDED" in html and MODEL in html and "<table>" in html
    assert repr(finished_job) == f"<fca.Job {finished_job.id} SUCCEEDED 100%>"


def test_export_is_the_layout_the_report_averages(client, finished_job):
    """The mean of every exported evaluation window, per site, is the
    report's per-site mean (SiteRow: over sequences, positions, channels)."""
    windows = client.windows(finished_job)
    evaluation = windows[~windows.calibration]
    assert len(evaluation) == SPEC["max_eval_windows"]
    model = client.models().set_index("name").loc[MODEL]
    sums = {}
    for h in evaluation.hash:
        c = client.export(MODEL, h)
        assert c.dtype == "float32" and c.window_length == SPEC["window_length"]
        assert list(c) == [s["name"] for s in model.sites]
        for s in model.sites:
            a = c[s["name"]]
            assert a.shape == (SPEC["window_length"], s["channels"]) and a.dtype == np.float32
            sums[s["name"]] = sums.get(s["name"], 0.0) + float(a.astype(np.float64).mean())
    sites = client.report(finished_job).sites.set_index("site")
    for name, total in sums.items():
        assert total / len(evaluation) == pytest.approx(sites.loc[name, "mean"], rel=1e-4,
                                                        abs=1e-6)
    with pytest.raises(fca.NotFound):
        client.export(MODEL, "0" * 64)


def test_pandas_and_tqdm_are_optional(server, finished_job):
    """Without pandas and tqdm: lists of dicts, no bar, the same values."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pandas', 'tqdm'):
            raise ImportError(name + ' blocked')
sys.meta_path.insert(0, Block())
import fca
c = fca.Client({server.address!r}, token={TOKEN!r})
rows = c.job({finished_job.id}).wait().results()
assert isinstance(rows, list) and isinstance(rows[0], dict), rows
assert 'pandas' not in sys.modules and 'tqdm' not in sys.modules
print(len(rows))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(finished_job.results())


def test_tls_with_a_ca_certificate(tmp_path):
    """A TLS server: the client trusts it with ca_cert (a path or the PEM's
    bytes); with the system roots only, the handshake fails (Unavailable)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    server = Server(tmp_path, flags=["--http_listen=", f"--tls_cert={cert}", f"--tls_key={key}"])
    try:
        assert MODEL in set(fca.Client(server.address, ca_cert=cert).models().name)
        assert MODEL in set(fca.Client(server.address, ca_cert=cert.read_bytes()).models().name)
        with pytest.raises(fca.Unavailable):
            fca.Client(server.address, tls=True, timeout=10).models()
        with pytest.raises(fca.Unavailable):
            fca.Client(server.address, timeout=10).models()  # plaintext
    finally:
        server.stop()
