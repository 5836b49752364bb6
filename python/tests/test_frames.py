"""Analysis-ready tables and the plot (docs/python.md "Tables and plots"):
report.penalties() joins each penalty with its iid CI, its block CI and its
Holm p as the stored rows have them; report.layers()'s shares follow
docs/fca.md "Per-group dependence" (share = penalty(I at g) / penalty(I); their
sum is group_additivity; a group holding every site carries all of it);
report.plot() draws the dashboard's charts; the spec is flattened into
columns of its own."""

import math

import pytest

from conftest import MODEL, SPEC


def _one(metrics, intervention, name, scope="model"):
    rows = metrics[(metrics.intervention == intervention) & (metrics.key_metric == name) &
                   (metrics.scope == scope)]
    assert len(rows) == 1, (intervention, name, rows)
    return rows.iloc[0]


def test_penalties_join_the_stored_rows(client, finished_job):
    report = client.report(finished_job)
    table = report.penalties()
    metrics = report.metrics
    interventions = set(metrics[metrics.key_metric == "penalty"].intervention)
    assert set(table.intervention) == interventions and len(table) == len(interventions)
    assert (table.model == MODEL).all()
    for row in table.itertuples():
        iid = _one(metrics, row.intervention, "penalty")
        block = _one(metrics, row.intervention, "penalty_block")
        holm = _one(metrics, row.intervention, "penalty_p_holm")
        assert (row.penalty, row.ci_low, row.ci_high, row.n) == \
            (iid.value, iid.ci_low, iid.ci_high, iid.n)
        assert (row.block_ci_low, row.block_ci_high) == (block.ci_low, block.ci_high)
        assert row.p_holm == holm.value
        # docs/fca.md "penalty_p_holm": distinguishable from 0 with
        # family-wise error at most 1 - ci_level when p_holm < 1 - ci_level.
        assert row.significant == (holm.value < 1 - report.ci_level)
        assert row.block_ci_excludes_0 == (block.ci_low > 0 or block.ci_high < 0)
    assert report.ci_level == pytest.approx(0.95)  # the default, filled in by the server


def test_layer_shares_add_up_to_group_additivity(client, finished_job):
    report = client.report(finished_job)
    layers = report.layers()
    metrics = report.metrics
    assert list(layers.group) == ["0", "1", "2", "3"]  # the model's four layers, in order
    assert (layers.scope == "layer").all() and (layers.intervention == "cross_input").all()
    whole = _one(metrics, "cross_input", "penalty_block")
    assert whole.ci_low > 0  # else no share is defined (and this test would say nothing)
    for row in layers.itertuples():
        stored = metrics[metrics.metric == row.metric].iloc[0]
        assert row.penalty == stored.value and row.ci_low == stored.ci_low
        assert row.share == pytest.approx(stored.value / whole.value, rel=1e-12)
    # sum_g penalty(I at g) / penalty(I) is group_additivity by its definition.
    additivity = _one(metrics, "cross_input", "group_additivity")
    assert layers.share.sum() == pytest.approx(additivity.value, rel=1e-9)


def test_a_group_holding_every_site_carries_the_whole_penalty(client, datasets):
    # OLMoE's only coefficient family is its routers': per family, the one
    # group replays exactly the whole-model intervention, so its share is 1.
    sites = client.models().set_index("name").sites["olmoe-s1"]
    assert len({s["family"] for s in sites}) == 1, sites
    job = client.submit(["olmoe-s1"], eval="eval.txt", calib="calib.txt",
                        interventions=["cross_input"], per_layer_interventions=["cross_input"],
                        per_layer_scope="family", **SPEC).wait(progress=False)
    layers = client.report(job).layers()
    assert len(layers) == 1 and layers.scope[0] == "family"
    assert layers.share[0] == pytest.approx(1.0, abs=1e-9)


def test_share_is_undefined_without_a_positive_whole_model_penalty():
    from fca import tables
    import pandas as pd

    class Scope:
        name, penalty_metric = "layer", "layer_penalty"

    def row(metric, key_metric, scope, value, ci_low, layer=None):
        return dict(model="m", intervention="i", metric=metric, key_metric=key_metric,
                    scope=scope, layer=layer, site=None, family=None, value=value,
                    ci_low=ci_low, ci_high=value + 1)

    metrics = pd.DataFrame([row("penalty_block", "penalty_block", "model", 0.5, -0.1),
                            row("layer_penalty.0", "layer_penalty", "layer", 0.4, 0.1, 0)])
    assert math.isnan(tables.layers(metrics, [Scope])["share"][0])
    metrics.loc[0, "ci_low"] = 0.01
    assert tables.layers(metrics, [Scope])["share"][0] == pytest.approx(0.8)


def test_plot_draws_the_penalty_and_per_layer_charts(client, finished_job, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    report = client.report(finished_job)
    fig = report.plot()
    fig.savefig(tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    penalty, per_layer = fig.axes
    assert penalty.get_xlabel() == "intervention"
    assert penalty.get_ylabel() == per_layer.get_ylabel() == "penalty (nats/token)"
    assert "95% CI" in penalty.get_title()
    # One bar per (intervention, model), with its CI as an error bar.
    assert len(penalty.patches) == len(report.penalties())
    labels = [t.get_text() for t in penalty.get_xticklabels()]
    assert labels == list(report.penalties().intervention)
    assert per_layer.get_xlabel() == "layer" and len(per_layer.patches) == 4
    heights = sorted(p.get_height() for p in per_layer.patches)
    assert heights == sorted(report.layers().penalty)


def test_jobs_spec_in_columns(client, finished_job):
    jobs = client.jobs()
    assert "spec" not in jobs.columns and "provenance" not in jobs.columns
    row = jobs[jobs.id == finished_job.id].iloc[0]
    assert row["spec.window_length"] == SPEC["window_length"]
    assert row["spec.models"] == [MODEL] and row["spec.per_layer_interventions"] == ["cross_input"]
    assert row["spec.label"] == "pytest"


def test_progress_bar_shows_the_servers_eta_not_tqdms(capsys):
    from fca import progress
    from fca.v1 import audit_service_pb2 as pb
    from tqdm.std import tqdm

    assert progress._tqdm() is tqdm  # no Jupyter kernel here: the text bar
    bar = progress.progress_bar(7)
    progress.show_progress(bar, pb.Progress(phase="replay", model="m", fraction=0.25,
                                            windows_done=3, windows_total=12, eta_seconds=75))
    line = capsys.readouterr().err.split("\r")[-1]
    assert "job 7:  25%" in line and "m replay 3/12, about 01:15 left" in line
    assert "<" not in line  # tqdm's own {remaining} estimate is not drawn
    progress.show_progress(bar, pb.Progress(phase="timing", fraction=0.5))
    line = capsys.readouterr().err.split("\r")[-1]
    assert line.rstrip().endswith("timing") and "left" not in line  # 0: unknown, none shown
    bar.close()
