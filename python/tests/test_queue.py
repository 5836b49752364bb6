"""fca.Client.queue() (GetQueue) against a real fca-server without workers
(`--workers=0`), where submitted jobs wait: the totals, the model and
project rows, and each caller's own jobs with their place in line, as
alice and as bob (whose project alice does not see)."""

import pytest

import fca
from conftest import MODEL, OTHER_TOKEN, SOURCE, SPEC, TOKEN, Server


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    """(alice, bob) clients of a server that runs nothing: alice has two
    jobs waiting (the older first in line), bob one behind them."""
    workdir = tmp_path_factory.mktemp("queue")
    keys = workdir / "api_keys"
    keys.write_text(f"{TOKEN} alice user\n{OTHER_TOKEN} bob user\n")
    keys.chmod(0o600)
    server = Server(workdir, flags=["--http_listen=", f"--api_keys={keys}", "--workers=0"])
    alice = fca.Client(server.address, token=TOKEN)
    bob = fca.Client(server.address, token=OTHER_TOKEN)
    data = {"eval.txt": (SOURCE / "docs" / "fca.md").read_bytes(),
            "calib.txt": (SOURCE / "docs" / "architecture.md").read_bytes()}
    for client in (alice, bob):
        for name, content in data.items():
            client.upload(content, name=name)
    jobs = {}
    jobs["alice"] = [alice.submit([MODEL], eval="eval.txt", calib="calib.txt", **SPEC).id
                     for _ in range(2)]
    jobs["bob"] = [bob.submit([MODEL], eval="eval.txt", calib="calib.txt", **SPEC).id]
    yield alice, bob, jobs
    alice.close()
    bob.close()
    server.stop()


def test_queue_counts_waiting_jobs_and_their_places(idle):
    alice, bob, jobs = idle
    queue = alice.queue()
    # Totals: the whole server, bob's job included; nothing runs.
    assert (queue["queued_jobs"], queue["running_jobs"]) == (3, 0)
    assert (queue["queued_tasks"], queue["running_tasks"]) == (3, 0)
    # Models and projects: alice's project by name, bob's only counted.
    models = queue["models"].set_index("model")
    assert list(models.index) == [MODEL]
    assert (models.loc[MODEL].queued_tasks, models.loc[MODEL].running_tasks) == (2, 0)
    assert list(models.loc[MODEL].loaded_on) == []
    projects = queue["projects"].set_index("project")
    assert list(projects.index) == ["alice", ""]
    assert (projects.loc["alice"].queued_jobs, projects.loc["alice"].queued_tasks) == (2, 2)
    assert (projects.loc[""].queued_jobs, projects.loc[""].running_jobs) == (1, 0)
    # Her jobs, oldest first: first and second in line.
    mine = queue["jobs"]
    assert list(mine.job_id) == jobs["alice"]
    assert set(mine.state) == {"QUEUED"} and set(mine.owner) == {"alice"}
    assert list(mine.position) == [1, 2] and list(mine.tasks_ahead) == [0, 1]
    assert list(mine.queued_tasks) == [1, 1] and list(mine.running_tasks) == [0, 0]

    # Bob: his one job, third in line behind alice's two tasks.
    theirs = bob.queue(as_frame=False)
    assert theirs["queued_jobs"] == 3
    assert theirs["jobs"] == [{"job_id": jobs["bob"][0], "project": "bob", "owner": "bob",
                               "state": "QUEUED", "position": 3, "tasks_ahead": 2,
                               "queued_tasks": 1, "running_tasks": 0}]
    assert [p["project"] for p in theirs["projects"]] == ["bob", ""]


def test_queue_follows_a_cancel(idle):
    alice, bob, jobs = idle
    alice.job(jobs["alice"][0]).cancel()
    queue = bob.queue()
    assert queue["queued_jobs"] == 2
    assert list(queue["jobs"].position) == [2] and list(queue["jobs"].tasks_ahead) == [1]
