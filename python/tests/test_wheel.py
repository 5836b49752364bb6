"""The wheel (python/pyproject.toml, built by the build into
build/python/dist) in a virtual environment, as a researcher's venv or conda
environment would have it: `pip install --no-index --no-deps` (this machine
reaches no package index; --system-site-packages lends the venv Debian's
grpcio, protobuf, numpy, pandas and tqdm), then docs/python.md's ten-line
script run by the venv's own interpreter against the real server, with the
build tree off the path."""

import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

from conftest import BUILD, SOURCE, TOKEN

WHEEL = pathlib.Path(os.environ.get("FCA_WHEEL", ""))


def ten_line_script():
    text = (SOURCE / "docs" / "python.md").read_text()
    section = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "docs/python.md's Install section should hold the one script"
    return blocks[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    assert WHEEL.is_file(), f"no wheel at {WHEEL!r} (build fca_python)"
    root = tmp_path_factory.mktemp("venv") / "env"
    # Debian's interpreter (the one whose site-packages the venv borrows),
    # not whichever python3 is first in PATH.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root)], check=True)
    python = root / "bin" / "python"
    out = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-deps",
                          "--disable-pip-version-check", str(WHEEL)],
                         capture_output=True, text=True, env=_without_build_tree())
    assert out.returncode == 0, out.stdout + out.stderr
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                             check=True).stdout.strip()
    return python, pathlib.Path(purelib)


def _without_build_tree():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def test_wheel_holds_the_package_and_the_stubs():
    names = set(zipfile.ZipFile(WHEEL).namelist())
    for module in ("fca/__init__.py", "fca/client.py", "fca/frames.py", "fca/version.py",
                   "fca/v1/audit_service_pb2.py", "fca/v1/audit_service_pb2_grpc.py"):
        assert module in names, sorted(names)
    metadata = zipfile.ZipFile(WHEEL).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # The runtimes the stubs need, from the build's protoc and gRPC
    # (python/CMakeLists.txt); what this machine has lies in those ranges.
    requires = re.findall(r"^Requires-Dist: (\S+) \(([^)]*)\)$", metadata, re.M)
    assert {name for name, _ in requires} >= {"grpcio", "protobuf"}, metadata
    assert "Provides-Extra: plot" in metadata and "Provides-Extra: frames" in metadata


def test_ten_line_script_in_a_venv(server, venv, tmp_path):
    python, purelib = venv
    script = ten_line_script()
    assert len(script.splitlines()) == 10, script
    (tmp_path / "script.py").write_text(script)
    (tmp_path / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (tmp_path / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    env = _without_build_tree()
    env.update(FCA_SERVER=server.address, FCA_TOKEN=TOKEN, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([str(python), "script.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    version, module = out.stdout.splitlines()[-1].split()
    # `import fca` found the installed wheel, not the build tree's copy.
    assert pathlib.Path(module).resolve().is_relative_to(purelib.resolve()), (module, purelib)
    assert not pathlib.Path(module).resolve().is_relative_to(BUILD.resolve())
    assert version == WHEEL.name.split("-")[1]  # fca-<version>-py3-none-any.whl
    assert "cross_input" in out.stdout  # the penalties table
    assert re.search(r"job \d+: 100%", out.stderr), out.stderr
