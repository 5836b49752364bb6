"""python/examples/quickstart.ipynb executed headless by Debian's
`jupyter nbconvert --execute` against the real server: every cell runs
without an error, the job, the report and the tables show as HTML, the plot
as an image, and the progress bar with no warning."""

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
    assert html.count("<table") >= 7
    assert "block_ci_low" in html and "share" in html  # report.penalties(), report.layers()
    # report.plot(): the Figure, shown inline as a PNG.
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # The progress bar warns of nothing (tqdm.auto's TqdmWarning "IProgress
    # not found", TqdmExperimentalWarning): stderr holds the bar alone.
    stderr = "".join("".join(o["text"]) for o in outputs
                     if o["output_type"] == "stream" and o["name"] == "stderr")
    assert "Warning" not in stderr and "warn" not in stderr.lower(), stderr
    assert "100%" in stderr  # the bar, drawn to the end
