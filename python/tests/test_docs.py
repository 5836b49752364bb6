"""docs/python.md's worked example, run as written: its ```python blocks of
the section "A worked example", in order, as one script, against the real
server, in a folder holding eval.txt and calib.txt."""

import os
import re
import subprocess
import sys

from conftest import SOURCE, TOKEN


def example_blocks():
    text = (SOURCE / "docs" / "python.md").read_text()
    section = text.split("## A worked example", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_worked_example_runs(server, tmp_path):
    blocks = example_blocks()
    assert len(blocks) >= 5, "the worked example lost its code blocks"
    (tmp_path / "example.py").write_text("\n".join(blocks))
    (tmp_path / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (tmp_path / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    env = dict(os.environ, FCA_SERVER=server.address, FCA_TOKEN=TOKEN)
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    # What the blocks print: the penalties, the per-layer rows, the typed error.
    assert "cross_input" in out.stdout and "layer_penalty" in out.stdout
    assert "refused: NOT_FOUND" in out.stdout and "no-such-model" in out.stdout
    assert "fca.Coefficients featuregate-small" in out.stdout
    # job.wait() drew its bar to the end (tqdm writes to stderr).
    assert re.search(r"job \d+: 100%", out.stderr), out.stderr
