"""A real fca-server on 127.0.0.1 for the Python suites, with the bundled
models (models/) and API keys, and one small audit that the suites share
(the server's only long wait, a few seconds).

The environment (python/CMakeLists.txt, ctest python_test): FCA_SERVER_BIN,
FCA_CLI_BIN, FCA_SOURCE_DIR, FCA_BUILD_DIR and PYTHONPATH=build/python.
"""

import os
import pathlib
import re
import subprocess
import time

import pytest

SOURCE = pathlib.Path(os.environ.get("FCA_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
BUILD = pathlib.Path(os.environ.get("FCA_BUILD_DIR", SOURCE / "build"))
SERVER_BIN = os.environ.get("FCA_SERVER_BIN", str(BUILD / "bin" / "fca-server"))
CLI_BIN = os.environ.get("FCA_CLI_BIN", str(BUILD / "bin" / "fca"))

TOKEN = "py-test-key-alice"
OTHER_TOKEN = "py-test-key-bob-b"
MODEL = "featuregate-small"
TWIN = "dense-small"
# Small enough for seconds on a busy core, large enough for every table.
SPEC = dict(window_length=32, max_eval_windows=12, max_calib_windows=12, batch_size=4,
            bootstrap_resamples=100, timing_repeats=0, seed=7)


class Server:
    """fca-server on free loopback ports, with API keys for alice and bob;
    `flags` replace the keys (and the HTTP port) when given; `models` is the
    model repository [the bundled models/]."""

    def __init__(self, workdir, flags=None, models=None):
        self.workdir = workdir
        if flags is None:
            keys = workdir / "api_keys"
            keys.write_text(f"{TOKEN} alice user\n{OTHER_TOKEN} bob user\n")
            keys.chmod(0o600)
            flags = ["--http_listen=127.0.0.1:0", f"--api_keys={keys}"]
        self.log = open(workdir / "server.log", "w")
        self.proc = subprocess.Popen(
            [SERVER_BIN, f"--models={models or SOURCE / 'models'}", f"--db={workdir / 'fca.sqlite'}",
             "--listen=127.0.0.1:0", "--threads=1", *flags],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        http = any(f.startswith("--http_listen=") and f != "--http_listen=" for f in flags)
        self.address = self.http = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (self.address is None or (http and self.http is None)):
            line = self.proc.stdout.readline()
            if not line:
                break
            if m := re.match(r"fca-server: listening on (\S+)", line):
                self.address = m.group(1)
            elif m := re.match(r"fca-server: http listening on (\S+)", line):
                self.http = m.group(1)
        if self.address is None or (http and self.http is None):
            log = self.log_text()
            self.stop()
            raise RuntimeError("fca-server did not start:\n" + log)

    def log_text(self):
        self.log.flush()
        return (self.workdir / "server.log").read_text()

    def cli(self, *args, token=TOKEN):
        env = dict(os.environ, FCA_SERVER=self.address, FCA_TOKEN=token)
        out = subprocess.run([CLI_BIN, *args], env=env, capture_output=True, text=True)
        assert out.returncode == 0, f"fca {' '.join(args)}: {out.stderr}"
        return out.stdout

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("server"))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import fca
    c = fca.Client(server.address, token=TOKEN)
    yield c
    c.close()


@pytest.fixture(scope="session")
def datasets(client, tmp_path_factory):
    """eval.txt and calib.txt: two of the repository's own documents."""
    d = tmp_path_factory.mktemp("data")
    (d / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (d / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    client.upload(d / "eval.txt")
    client.upload(d / "calib.txt")
    return d


@pytest.fixture(scope="session")
def finished_job(client, datasets):
    """One audit of MODEL against its dense twin, per layer, finished."""
    job = client.submit([MODEL], eval="eval.txt", calib="calib.txt", dense_twin=TWIN,
                        per_layer_interventions=["cross_input"], label="pytest", **SPEC)
    return job.wait(progress=False)
