"""The python3-fca Debian package: built by cpack from the build tree,
extracted with dpkg-deb -x into a scratch root (nothing is installed on this
system; `apt install ./python3-fca_*.deb` puts the same files under /usr),
its Depends present, and a ten-line script run against the extracted
package alone: it uploads, audits, waits with a progress bar and gets a
DataFrame whose values equal `fca results --format=csv`."""

import csv
import io
import math
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, SOURCE, TOKEN

SCRIPT = """\
import sys, fca
client = fca.Client()
client.upload("eval.txt")
client.upload("calib.txt")
job = client.submit(["featuregate-small"], eval="eval.txt", calib="calib.txt",
                    window_length=32, max_eval_windows=8, max_calib_windows=8, timing_repeats=0)
job.wait()
df = job.results()
df.to_csv("results.csv", index=False)
print(job.id, fca.__file__)
"""


@pytest.fixture(scope="module")
def package_root(tmp_path_factory):
    for tool in ("cpack", "dpkg-deb"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found")
    work = tmp_path_factory.mktemp("package")
    out = subprocess.run(
        ["cpack", "-G", "DEB", "--config", str(BUILD / "CPackConfig.cmake"), "-D",
         "CPACK_COMPONENTS_ALL=python3-fca", "-B", str(work / "packages")],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    debs = list((work / "packages").glob("python3-fca_*_all.deb"))
    assert len(debs) == 1, list((work / "packages").iterdir())
    deb = debs[0]
    # Its Depends are what Debian's python3 has here (apt would resolve them).
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True,
                             text=True, check=True).stdout
    for dep in depends.split(","):
        name = dep.split()[0]
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True,
                                text=True).stdout
        assert "install ok installed" in status, f"{name} (a Depends of {deb.name}) is missing"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    files = sorted(line.split()[-1].lstrip(".") for line in listing.splitlines()
                   if not line.startswith("d"))
    site = "/usr/lib/python3/dist-packages/fca/"
    assert files == sorted(site + f for f in [
        "__init__.py", "_optional.py", "client.py", "coefficients.py", "comparison.py", "enums.py",
        "errors.py", "frames.py", "plot.py", "progress.py", "stacked.py", "tables.py", "version.py",
        "v1/__init__.py", "v1/audit_service_pb2.py", "v1/audit_service_pb2_grpc.py"]), files
    root = work / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def test_ten_line_script_with_the_package(server, package_root, tmp_path):
    assert len(SCRIPT.splitlines()) == 10
    site = package_root / "usr" / "lib" / "python3" / "dist-packages"
    (tmp_path / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (tmp_path / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    (tmp_path / "script.py").write_text(SCRIPT)
    # Only the extracted package on the path: not the build tree's copy.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), FCA_SERVER=server.address, FCA_TOKEN=TOKEN)
    out = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    job_id, module = out.stdout.split()
    assert module.startswith(str(site))
    assert f"job {job_id}: 100%" in out.stderr  # the progress bar, drawn to the end

    with open(tmp_path / "results.csv") as f:
        got = list(csv.DictReader(f))
    want = list(csv.DictReader(io.StringIO(server.cli("results", f"--job={job_id}",
                                                      "--format=csv"))))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        for key in ("job_id", "model", "weights_sha256", "dataset_sha256", "intervention",
                    "metric", "n"):
            assert g[key] == w[key], key
        assert g["defined"] == ("True" if w["defined"] == "true" else "False")
        for key in ("value", "ci_low", "ci_high"):
            a = math.nan if g[key] == "" else float(g[key])
            b = math.nan if w[key] == "" else float(w[key])
            assert (math.isnan(a) and math.isnan(b)) or a == b, (key, g, w)
