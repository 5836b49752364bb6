"""Tiny TorchScript modules for the tests of fca's torchscript family: one that keeps
the contract of docs/torchscript.md and several that break it, each in its own way.

TinyGate: byte ids (vocab 256) -> embedding (d = 16) -> 2 blocks, each an MLP branch
scaled per channel group by a gate g = 2 sigmoid(W x) of 4 channels (sites gate.0,
gate.1), -> head. count() reports distinct per-token figures per mode so a test can
tell which method ran: blocks 2 (live), 1 (record), 2 (replay); FLOPs 200, 100, 300.

The broken modules wrap a TinyGate: those whose methods are missing or misdeclared
are classes of their own; the others are one class, Defective, whose `defect` says
which rule of the contract its methods break.
"""
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VOCAB, D, GROUPS, LAYERS = 256, 16, 4, 2


class TinyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.groups = GROUPS
        self.ctrl = nn.Linear(D, GROUPS)
        self.fc = nn.Linear(D, D)

    def gate(self, x: Tensor) -> Tensor:
        return 2.0 * torch.sigmoid(self.ctrl(x))

    def forward(self, x: Tensor, g: Tensor) -> Tensor:
        B, T, D = x.shape[0], x.shape[1], x.shape[2]
        y = F.gelu(self.fc(x)).view(B, T, self.groups, D // self.groups) * g.unsqueeze(-1)
        return x + y.view(B, T, D)


class TinyGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.groups = GROUPS
        self.layers = LAYERS
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([TinyBlock() for _ in range(LAYERS)])
        self.head = nn.Linear(D, VOCAB, bias=False)

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        x = self.emb(ids)
        coefficients: List[Tensor] = []
        for block in self.blocks:
            g = block.gate(x)
            coefficients.append(g)
            x = block(x, g)
        return self.head(x), coefficients

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        x = self.emb(ids)
        i = 0
        for block in self.blocks:
            x = block(x, coefficients[i])
            i += 1
        return self.head(x)

    @torch.jit.export
    def record(self, ids: Tensor) -> List[Tensor]:
        return self.live(ids)[1]

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return [torch.ones(self.groups, dtype=self.head.weight.dtype) for _ in range(self.layers)]

    @torch.jit.export
    def count(self, ids: Tensor, coefficients: List[Tensor], mode: str) -> Tuple[int, float]:
        tokens = ids.shape[0] * ids.shape[1]
        if mode == "record":
            return tokens, 100.0 * tokens
        if mode == "replay":
            return 2 * tokens, 300.0 * tokens
        return 2 * tokens, 200.0 * tokens


class NoReplay(nn.Module):
    """Exports live() only."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        return self.inner.live(ids)


class WrongSignature(NoReplay):
    """live() takes a second argument."""

    @torch.jit.export
    def live(self, ids: Tensor, scale: float) -> Tuple[Tensor, List[Tensor]]:
        logits, c = self.inner.live(ids)
        return logits * scale, c

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)


class NoOptionalMethods(NoReplay):
    """Keeps the contract without the optional methods (no record, neutral or count)."""

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)


DEFECTS = {
    "too-few-coefficients": "live() returns one coefficient tensor for two declared sites",
    "wrong-channels": "live() returns gates of 3 channels where config.json declares 4",
    "replay-recomputes": "replay() runs the controllers again, ignoring its coefficients",
    "unfaithful": "replay() uses its coefficients but adds 1e-3 to every logit",
    "throws": "live() raises on every call",
    "throws-on-long-windows": "passes the load-time probe (8 tokens), raises on longer windows",
    "record-disagrees": "record() returns other coefficients than live()",
}


class Defective(nn.Module):
    """A TinyGate whose methods break the contract as DEFECTS[defect] says."""

    def __init__(self, defect: str):
        super().__init__()
        self.defect = defect
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        if self.defect == "throws":
            raise RuntimeError("this module always fails")
        if self.defect == "throws-on-long-windows" and ids.shape[1] > 8:
            raise ValueError("windows longer than 8 tokens are not supported")
        logits, c = self.inner.live(ids)
        if self.defect == "too-few-coefficients":
            return logits, c[:1]
        if self.defect == "wrong-channels":
            return logits, [t[..., :3] for t in c]
        return logits, c

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        if self.defect == "replay-recomputes":
            return self.inner.live(ids)[0]
        logits = self.inner.replay(ids, coefficients)
        if self.defect == "unfaithful":
            return logits + 1e-3
        return logits

    @torch.jit.export
    def record(self, ids: Tensor) -> List[Tensor]:
        c = self.live(ids)[1]
        if self.defect == "record-disagrees":
            return [t * 0.5 for t in c]
        return c

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()
