"""client.pool (PoolJobs, issue 38): two seeds audited in two jobs read as
one report equal the job that audited both (docs/fca.md "Pooling jobs")."""

import pytest

import fca
from conftest import SPEC

SEEDS = ["featuregate-s1", "featuregate-s2"]
POOL_SPEC = dict(SPEC, interventions=["correct", "cross_input", "global_mean"])


@pytest.fixture(scope="module")
def seed_jobs(client, datasets):
    """featuregate-s1 and -s2 in a job each, and one job of both."""
    jobs = [client.submit(models, eval="eval.txt", calib="calib.txt", label="pool", **POOL_SPEC)
            for models in ([SEEDS[0]], [SEEDS[1]], SEEDS)]
    return [j.wait(progress=False) for j in jobs]


def test_pool_equals_the_job_of_both(client, seed_jobs):
    first, second, both = seed_jobs
    pooled = client.pool([first, second.id])
    assert isinstance(pooled, fca.Report)
    assert pooled.models == SEEDS
    assert pooled.job_ids == [first.id, second.id]
    sources = pooled.sources
    assert list(sources.model) == SEEDS and list(sources.job_id) == [first.id, second.id]
    single = client.report(both).across_models.set_index(["intervention", "metric"])
    across = pooled.across_models.set_index(["intervention", "metric"])
    compared = 0
    for intervention in POOL_SPEC["interventions"]:
        for metric in ["nll", "penalty"]:
            if (intervention, metric) not in single.index:
                continue
            for column in ["n", "mean", "sd", "ci_low", "ci_high"]:
                assert across.loc[(intervention, metric), column] == \
                    pytest.approx(single.loc[(intervention, metric), column], rel=1e-9, abs=1e-12)
            compared += 1
    assert compared >= 5
    # Each model's rows are its own job's.
    metrics = pooled.metrics
    assert set(metrics[metrics.model == SEEDS[1]].job_id) == {second.id}


def test_pool_refusals(client, seed_jobs, finished_job):
    first, second, both = seed_jobs
    with pytest.raises(fca.InvalidArgument):
        client.pool([first])
    with pytest.raises(fca.FailedPrecondition, match=SEEDS[0]):
        client.pool([first, both])  # featuregate-s1 would count twice
    # The shared job has a dense twin and per-layer interventions: named,
    # with each job's value.
    with pytest.raises(fca.FailedPrecondition, match="dense_twin") as e:
        client.pool([first, finished_job])
    assert "per_layer_interventions" in str(e.value)
    assert f"job {finished_job.id}: \"dense-small\"" in str(e.value)
