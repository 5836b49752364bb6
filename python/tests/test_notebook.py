"""python/examples/quickstart.ipynb executed headless by Debian's
`jupyter nbconvert --execute` against the real server: every cell runs
without an error and the job, the report and the tables show as HTML."""

import json
import os
import shutil
import subprocess

from conftest import SOURCE, TOKEN


def test_quickstart_notebook_runs_headless(server, tmp_path):
    notebook = SOURCE / "python" / "examples" / "quickstart.ipynb"
    (tmp_path / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (tmp_path / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    shutil.copy(notebook, tmp_path / "quickstart.ipynb")
    env = dict(os.environ, FCA_SERVER=server.address, FCA_TOKEN=TOKEN,
               FCA_EXAMPLE_DATA=str(tmp_path), JUPYTER_PLATFORM_DIRS="1")
    out = subprocess.run(
        [shutil.which("jupyter", path="/usr/bin") or "jupyter", "nbconvert", "--to", "notebook", "--execute", "--output", "executed.ipynb",
         "--ExecutePreprocessor.timeout=120", str(tmp_path / "quickstart.ipynb")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    executed = json.loads((tmp_path / "executed.ipynb").read_text())
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    html = "".join("".join(o.get("data", {}).get("text/html", [])) for o in outputs)
    assert "SUCCEEDED" in html  # the job's _repr_html_
    assert "featuregate-small" in html and "layer_penalty" in html
    assert html.count("<table") >= 5
