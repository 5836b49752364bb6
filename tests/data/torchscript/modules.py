"""Tiny TorchScript modules for the tests of fca's torchscript family: one that keeps
the contract of docs/torchscript.md and several that break it, each in its own way.

TinyGate: byte ids (vocab 256) -> embedding (d = 16) -> 2 blocks, each an MLP branch
scaled per channel group by a gate g = 2 sigmoid(W x) of 4 channels (sites gate.0,
gate.1), -> head. count() reports distinct per-token figures per mode so a test can
tell which method ran: blocks 2 (live), 1 (record), 2 (replay); FLOPs 200, 100, 300.
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


class WrongSignature(nn.Module):
    """live() takes a second argument."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor, scale: float) -> Tuple[Tensor, List[Tensor]]:
        logits, c = self.inner.live(ids)
        return logits * scale, c

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class TooFewCoefficients(nn.Module):
    """live() returns one coefficient tensor for two declared sites."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        logits, c = self.inner.live(ids)
        return logits, c[:1]

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class WrongChannels(nn.Module):
    """live() returns gates of 3 channels where config.json declares 4."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        logits, c = self.inner.live(ids)
        return logits, [t[..., :3] for t in c]

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class ReplayRecomputes(nn.Module):
    """replay() runs the controllers again and ignores the coefficients it is given."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.live(ids)[0]

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        return self.inner.live(ids)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class Unfaithful(nn.Module):
    """replay() uses its coefficients but does not reproduce live(): +1e-3 on every logit."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients) + 1e-3

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        return self.inner.live(ids)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class Throws(nn.Module):
    """live() raises on every call."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        if ids.shape[0] > 0:
            raise RuntimeError("this module always fails")
        return self.inner.live(ids)

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class ThrowsOnLongWindows(nn.Module):
    """Passes the load-time probe (8 tokens) and raises on longer windows."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        if ids.shape[1] > 8:
            raise ValueError("windows longer than 8 tokens are not supported")
        return self.inner.live(ids)

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class RecordDisagrees(nn.Module):
    """record() returns other coefficients than live()."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def record(self, ids: Tensor) -> List[Tensor]:
        return [c * 0.5 for c in self.inner.live(ids)[1]]


    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        return self.inner.live(ids)

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        return self.inner.neutral()


class NoNeutral(nn.Module):
    """Keeps the contract without the optional methods (no record, neutral or count)."""

    def __init__(self):
        super().__init__()
        self.inner = TinyGate()

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        return self.inner.live(ids)

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        return self.inner.replay(ids, coefficients)
