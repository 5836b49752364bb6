"""A job's coefficients stacked [N, T, C] (docs/python.md "Coefficients"):
job.coefficients() and `fca export --job`, each window compared with the
CLI's one-window .npy export, the files read back with numpy (.npy) and by
parsing the safetensors header by hand."""

import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

from conftest import CLI_BIN, MODEL, TOKEN


def read_safetensors(path):
    """(header, data): the JSON header after the 8-byte little-endian length,
    and the bytes after it (the safetensors format)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    return json.loads(raw[8:8 + n]), raw[8 + n:]


@pytest.fixture(scope="module")
def stacked(finished_job):
    return finished_job.coefficients()


def test_stack_is_every_evaluation_window_as_the_cli_exports_it(server, client, finished_job,
                                                                stacked, tmp_path):
    windows = finished_job.windows()
    evaluation = list(windows[~windows.calibration].hash)
    header = client.export(MODEL, evaluation[0]).header
    channels = sum(s.channels for s in header.sites)
    assert stacked.shape == (len(evaluation), header.window_length, channels)
    assert stacked.window_hashes == evaluation
    assert stacked.array.dtype == np.float32
    for n in (0, len(evaluation) - 1):
        out = tmp_path / f"w{n}.npy"
        server.cli("export", f"--model={MODEL}", f"--window_hash={evaluation[n]}", f"--out={out}")
        np.testing.assert_array_equal(stacked.array[n], np.load(out))
    calibration = finished_job.coefficients(calibration=True)
    assert calibration.window_hashes == list(windows[windows.calibration].hash)


def test_save_npy_reads_back_with_numpy(stacked, tmp_path):
    path = stacked.save(tmp_path / "c.npy")
    back = np.load(path)
    assert back.dtype == stacked.array.dtype and back.shape == stacked.shape
    np.testing.assert_array_equal(back, stacked.array)


def test_save_safetensors_header_and_data(stacked, tmp_path):
    header, data = read_safetensors(pathlib.Path(stacked.save(tmp_path / "c.safetensors")))
    tensor = header["coefficients"]
    assert tensor["dtype"] == "F32" and tensor["shape"] == list(stacked.shape)
    assert tensor["data_offsets"] == [0, stacked.array.nbytes] == [0, len(data)]
    np.testing.assert_array_equal(np.frombuffer(data, "<f4").reshape(stacked.shape),
                                  stacked.array)
    meta = header["__metadata__"]
    assert json.loads(meta["window_hashes"]) == stacked.window_hashes
    assert meta["model"] == MODEL and meta["dtype"] == "float32"
    assert [name for name, _ in json.loads(meta["sites"])] == list(stacked.sites.name)


def test_cli_export_job_writes_the_same_stack(server, finished_job, stacked, tmp_path):
    server.cli("export", f"--job={finished_job.id}", f"--out={tmp_path / 'all.npy'}")
    np.testing.assert_array_equal(np.load(tmp_path / "all.npy"), stacked.array)
    server.cli("export", f"--job={finished_job.id}", f"--out={tmp_path / 'all.safetensors'}")
    header, data = read_safetensors(tmp_path / "all.safetensors")
    assert header["coefficients"]["shape"] == list(stacked.shape)
    assert json.loads(header["__metadata__"]["window_hashes"]) == stacked.window_hashes
    np.testing.assert_array_equal(np.frombuffer(data, "<f4").reshape(stacked.shape),
                                  stacked.array)


def test_save_refuses_an_unknown_format(stacked, tmp_path):
    with pytest.raises(ValueError, match="npy or safetensors"):
        stacked.save(tmp_path / "c.bin")


def test_cli_export_job_refuses_raw_and_a_window_hash(server, finished_job, tmp_path):
    env = dict(os.environ, FCA_SERVER=server.address, FCA_TOKEN=TOKEN)
    for extra in (["--format=raw"], ["--window_hash=" + "a" * 64]):
        out = subprocess.run([CLI_BIN, "export", f"--job={finished_job.id}",
                              f"--out={tmp_path / 'x.npy'}", *extra],
                             env=env, capture_output=True, text=True)
        assert out.returncode == 2, out.stderr  # a usage error, nothing written
        assert "--job" in out.stderr and not (tmp_path / "x.npy").exists()
