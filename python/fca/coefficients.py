"""Exported coefficients as numpy arrays.

The layout is the one proto/fca/v1/audit_service.proto gives for
ExportCoefficientsResponse: after the header, the chunks carry the sites in
the header's order (site-major), each a row-major [T, channels] array
(T = header.window_length), little-endian, of header.dtype.
"""

import numpy as np

from fca import frames

# The element types the server's cache holds. numpy has no bfloat16: its
# values are widened to float32 exactly (a bfloat16 is the high half of one).
_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2")}


def decode(dtype, data):
    """The bytes of one cache entry as a flat numpy array (bfloat16: float32)."""
    if dtype not in _DTYPES:
        raise ValueError(f"unknown coefficient dtype {dtype!r} (known: {sorted(_DTYPES)})")
    flat = np.frombuffer(data, dtype=_DTYPES[dtype])
    if dtype == "bfloat16":
        flat = (flat.astype("<u4") << 16).view("<f4")
    return flat


class Coefficients:
    """One model's coefficients on one window.

    header: the CoefficientsHeader message; dtype: the server's element type
    ("float32", "float16", "bfloat16"); window_length: T; arrays: site name ->
    numpy array of shape (T, channels) (a read-only view of the bytes, in
    float32 for bfloat16); `coefficients["attn_gate.0"]` is one of them.
    """

    def __init__(self, header, data):
        self.header = header
        self.dtype = header.dtype
        self.window_length = header.window_length
        if len(data) != header.total_bytes:
            raise ValueError(f"export carried {len(data)} bytes, the header said "
                             f"{header.total_bytes}")
        flat = decode(header.dtype, data)
        t = header.window_length
        per_token = sum(s.channels for s in header.sites)
        if flat.size != t * per_token:
            raise ValueError(f"export holds {flat.size} values, not T={t} x {per_token} channels")
        self.arrays = {}
        offset = 0
        for site in header.sites:
            n = t * site.channels
            self.arrays[site.name] = flat[offset:offset + n].reshape(t, site.channels)
            offset += n

    @property
    def sites(self):
        """The sites as a DataFrame (name, family, layer, channels)."""
        return frames.messages_frame(self.header.sites, self.header.sites[0].DESCRIPTOR) \
            if len(self.header.sites) else frames.frame([], ["name", "family", "layer", "channels"])

    def __getitem__(self, site):
        return self.arrays[site]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self):
        return len(self.arrays)

    def stacked(self):
        """All sites as one array (sites, T, channels); ValueError when the
        sites' channel counts differ."""
        shapes = {a.shape for a in self.arrays.values()}
        if len(shapes) != 1:
            raise ValueError(f"sites have different shapes {sorted(shapes)}; use .arrays")
        return np.stack(list(self.arrays.values()))

    def __repr__(self):
        return (f"<fca.Coefficients {self.header.model} window {self.header.window_hash[:12]}: "
                f"{len(self.arrays)} sites x T={self.window_length}, {self.dtype}>")
