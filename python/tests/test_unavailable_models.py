"""A model repository with one good folder and two whose config.json the
server refuses (a missing key, an unknown model_type), through a real
fca-server: `fca models`, the HTTP API, fca.Client.models() and a submission
naming a refused folder all say which folder and why."""

import json
import os
import shutil
import urllib.request

import pytest

import fca
from conftest import SOURCE, TOKEN, TWIN, Server

REPORT_WIDTH = 100  # client/format.h kReportWidth: `fca models` fits in it


def folder_like_twin(root, name, edit):
    """A copy of the bundled dense twin whose config.json is edited by `edit`."""
    (root / name).mkdir()
    os.symlink(SOURCE / "models" / TWIN / "model.safetensors", root / name / "model.safetensors")
    config = json.loads((SOURCE / "models" / TWIN / "config.json").read_text())
    edit(config)
    (root / name / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def broken_repo_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(SOURCE / "models" / TWIN, root / TWIN)
    folder_like_twin(root, "no-d-model", lambda c: c.pop("d_model"))
    folder_like_twin(root, "xl-type", lambda c: c.update(model_type="transformer-xl"))
    s = Server(tmp_path_factory.mktemp("server"), models=root)
    yield s
    s.stop()


def test_cli_lists_the_refused_folders_with_their_reasons(broken_repo_server):
    out = broken_repo_server.cli("models")
    table, _, unavailable = out.partition("Unavailable")
    assert TWIN in table and "no-d-model" not in table and "xl-type" not in table
    lines = unavailable.splitlines()
    no_key = next(line for line in lines if line.startswith("no-d-model: "))
    assert "d_model" in no_key
    xl = next(line for line in lines if line.startswith("xl-type: "))
    assert "model_type 'transformer-xl' is not supported" in xl
    assert all(len(line) <= REPORT_WIDTH for line in out.splitlines()), out


def test_http_api_lists_them(broken_repo_server):
    request = urllib.request.Request(
        f"http://{broken_repo_server.http}/api/v1/ListModels", data=b"{}", method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        listed = json.load(reply)
    assert [m["name"] for m in listed["models"]] == [TWIN]
    reasons = {u["name"]: u["reason"] for u in listed["unavailable"]}
    assert sorted(reasons) == ["no-d-model", "xl-type"]
    assert "d_model" in reasons["no-d-model"]
    assert "transformer-xl" in reasons["xl-type"]


def test_models_frame_has_state_and_reason(broken_repo_server):
    with fca.Client(broken_repo_server.address, token=TOKEN) as c:
        models = c.models().set_index("name")
        rows = c.models(as_frame=False)
    assert list(models.state) == ["READY", "UNAVAILABLE", "UNAVAILABLE"]
    assert models.loc[TWIN].reason == "" and models.loc[TWIN].family == "dense"
    assert "d_model" in models.loc["no-d-model"].reason
    assert "transformer-xl" in models.loc["xl-type"].reason
    assert [r["state"] for r in rows] == ["READY", "UNAVAILABLE", "UNAVAILABLE"]


def test_submitting_a_refused_folder_is_failed_precondition_with_the_reason(broken_repo_server):
    with fca.Client(broken_repo_server.address, token=TOKEN) as c:
        with pytest.raises(fca.FailedPrecondition) as e:
            c.submit(["xl-type"], eval="eval.txt", calib="calib.txt")
        assert "model 'xl-type' is unavailable" in str(e.value)
        assert "model_type 'transformer-xl' is not supported" in str(e.value)
        # The server keeps serving.
        assert TWIN in set(c.models().name)
