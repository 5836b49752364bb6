"""A job's coefficients as one array [N, T, C] (Job.coefficients()) and the
two files it saves as, .npy and .safetensors, written here (no package
beyond numpy).

The layout is `fca export --job`'s (docs/user-guide.md, "Coefficients"):
N windows of the job in its window order, T tokens, C the channels of every
site side by side in the header's site order (site s holds the columns from
the sum of the channels before it), as one window's `fca export` .npy.
"""

import json
import struct

import numpy as np

# numpy dtype -> safetensors dtype name (the safetensors format's names).
_SAFETENSORS_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16"}


def npy_bytes(array):
    """NPY format 1.0 (numpy.lib.format): magic, version 1.0, a uint16 LE
    header length, the header (a Python dict literal) padded with spaces and
    ended by a newline so that the data starts at a multiple of 64 bytes,
    then the C-order data."""
    array = np.ascontiguousarray(array)
    shape = repr(tuple(int(d) for d in array.shape))  # "(3, 32, 64)", "(5,)"
    header = f"{{'descr': '{array.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
    unpadded = 10 + len(header) + 1
    header += " " * ((64 - unpadded % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + \
        array.tobytes()


def safetensors_bytes(tensors, metadata):
    """safetensors: a uint64 LE header length, the JSON header (each tensor's
    dtype, shape and [begin, end) byte offsets into the data, and
    __metadata__, strings only) padded with spaces to a multiple of 8, then
    the tensors' bytes in order."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset, data = 0, []
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        if array.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"safetensors: no dtype name for {array.dtype}")
        header[name] = {"dtype": _SAFETENSORS_DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        data.append(array.tobytes())
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(data)


def token_major(coefficients):
    """One window's coefficients (fca.Coefficients) as [T, C]: each site's
    [T, channels] side by side in the header's order."""
    return np.concatenate([coefficients.arrays[s.name] for s in coefficients.header.sites], axis=1)


class StackedCoefficients:
    """A model's coefficients on a job's windows: `array` [N, T, C] (numpy;
    float32 for a bfloat16 cache), `window_hashes` (N, in the job's window
    order), `sites` (name, family, layer, channels; the columns' order),
    `model`, `weights_sha256`, `dtype` (the server's: "float32", "float16",
    "bfloat16"). `np.asarray(stacked)` is the array; save(path) writes it."""

    def __init__(self, windows):
        if not windows:
            raise ValueError("no windows to stack")
        first = windows[0].header
        for w in windows:
            if [(s.name, s.channels) for s in w.header.sites] != \
                    [(s.name, s.channels) for s in first.sites]:
                raise ValueError(f"window {w.header.window_hash} has other sites than "
                                 f"{first.window_hash}")
        self.model = first.model
        self.weights_sha256 = first.weights_sha256
        self.dtype = first.dtype
        self.window_hashes = [w.header.window_hash for w in windows]
        self.sites = windows[0].sites
        self.site_channels = [(s.name, s.channels) for s in first.sites]
        self.array = np.stack([token_major(w) for w in windows])

    def __array__(self, dtype=None):
        return self.array if dtype is None else self.array.astype(dtype)

    @property
    def shape(self):
        return self.array.shape

    def metadata(self):
        """What the .safetensors file's __metadata__ holds (strings)."""
        return {"model": self.model, "weights_sha256": self.weights_sha256, "dtype": self.dtype,
                "layout": "[N windows, T tokens, C channels]",
                "window_hashes": json.dumps(self.window_hashes),
                "sites": json.dumps([[n, c] for n, c in self.site_channels])}

    def save(self, path, format=None):
        """Writes the array to `path`: format "npy" or "safetensors", by
        default from the extension (.npy, .safetensors). The .safetensors
        file holds one tensor, "coefficients" [N, T, C], and metadata()."""
        path = str(path)
        format = format or ("npy" if path.endswith(".npy") else
                            "safetensors" if path.endswith(".safetensors") else None)
        if format == "npy":
            data = npy_bytes(self.array)
        elif format == "safetensors":
            data = safetensors_bytes({"coefficients": self.array}, self.metadata())
        else:
            raise ValueError(f"save: format must be npy or safetensors (or a path ending .npy "
                             f"or .safetensors), not {format!r} for {path!r}")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def __repr__(self):
        n, t, c = self.array.shape
        return (f"<fca.StackedCoefficients {self.model}: N={n} windows x T={t} x C={c} "
                f"channels ({len(self.site_channels)} sites), {self.dtype}>")
