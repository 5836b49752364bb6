"""The bundled `featuregate` family as a TorchScript module for fca's `torchscript` family.

The network of server/engine/models/transformer_net.cc (and bench/eager_audit.py):
pre-LN blocks with learned positions; per block a controller
g = 2 * sigmoid(fc2(gelu(fc1(LN_c(h))))) whose first n_groups values scale the attention
branch and the next n_groups the MLP branch, each gate scaling d_model / n_groups
channels; causal softmax attention, GELU MLP, final LN, an untied lm_head.

The coefficient sites are attn_gate.l and mlp_gate.l for each layer l, in that order,
each [B, T, n_groups]: the same sites, in the same order, as the native family, so an
audit of the exported module can be compared number by number with the native one.
The methods are the contract of docs/torchscript.md.
"""
import math
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def embed_with_positions(tok_emb: Tensor, pos_emb: Tensor, ids: Tensor) -> Tuple[Tensor, Tensor]:
    """Token plus learned position embeddings [B, T, D] (the two embedding tables'
    weights), and the causal mask [T, T] (-inf above the diagonal) in their dtype."""
    T = ids.shape[1]
    x = F.embedding(ids, tok_emb) + pos_emb[:T]
    return x, torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)


class Controller(nn.Module):
    def __init__(self, d_model: int, width: int, n_groups: int, eps: float):
        super().__init__()
        self.ln = nn.LayerNorm(d_model, eps=eps)
        self.fc1 = nn.Linear(d_model, width)
        self.fc2 = nn.Linear(width, 2 * n_groups)

    def forward(self, h: Tensor) -> Tensor:
        return 2.0 * torch.sigmoid(self.fc2(F.gelu(self.fc1(self.ln(h)))))


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        B, T, D = x.shape
        hd = D // self.n_heads
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hd)) + mask, dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(B, T, D))


class Mlp(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        D, eps = c["d_model"], c["norm_eps"]
        self.n_groups = c["n_groups"]
        self.ctrl = Controller(D, c["controller_width"], self.n_groups, eps)
        self.ln1 = nn.LayerNorm(D, eps=eps)
        self.attn = Attention(D, c["n_heads"])
        self.ln2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(D, c["d_ff"])

    def gates(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        g = self.ctrl(x)
        return g[..., : self.n_groups].contiguous(), g[..., self.n_groups :].contiguous()

    def gated(self, y: Tensor, g: Tensor) -> Tensor:
        B, T, D = y.shape
        return (y.view(B, T, self.n_groups, D // self.n_groups) * g.unsqueeze(-1)).view(B, T, D)

    def forward(self, x: Tensor, ga: Tensor, gm: Tensor, mask: Tensor) -> Tensor:
        x = x + self.gated(self.attn(self.ln1(x), mask), ga)
        return x + self.gated(self.mlp(self.ln2(x)), gm)


class FeatureGateLM(nn.Module):
    """Parameter names are the native checkpoint's, so load_state_dict reads it as is."""

    def __init__(self, c: dict):
        super().__init__()
        D = c["d_model"]
        self.n_layers = c["n_layers"]
        self.n_groups = c["n_groups"]
        self.d_model = D
        self.d_ff = c["d_ff"]
        self.width = c["controller_width"]
        self.vocab_size = c["vocab_size"]
        self.tok_emb = nn.Embedding(c["vocab_size"], D)
        self.pos_emb = nn.Embedding(c["max_seq_len"], D)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c["n_layers"])])
        self.ln_f = nn.LayerNorm(D, eps=c["norm_eps"])
        self.lm_head = nn.Linear(D, c["vocab_size"], bias=False)

    def embed(self, ids: Tensor) -> Tuple[Tensor, Tensor]:
        return embed_with_positions(self.tok_emb.weight, self.pos_emb.weight, ids)

    # ---- the contract (docs/torchscript.md)

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        x, mask = self.embed(ids)
        coefficients: List[Tensor] = []
        for block in self.blocks:
            ga, gm = block.gates(x)
            coefficients.append(ga)
            coefficients.append(gm)
            x = block(x, ga, gm, mask)
        return self.lm_head(self.ln_f(x)), coefficients

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        # The controllers do not run: every gate comes from `coefficients`.
        x, mask = self.embed(ids)
        i = 0
        for block in self.blocks:
            x = block(x, coefficients[2 * i], coefficients[2 * i + 1], mask)
            i += 1
        return self.lm_head(self.ln_f(x))

    @torch.jit.export
    def record(self, ids: Tensor) -> List[Tensor]:
        # Calibration needs the gates only: the last block's branches and the head
        # are not run.
        x, mask = self.embed(ids)
        coefficients: List[Tensor] = []
        i = 0
        for block in self.blocks:
            ga, gm = block.gates(x)
            coefficients.append(ga)
            coefficients.append(gm)
            if i + 1 < self.n_layers:
                x = block(x, ga, gm, mask)
            i += 1
        return coefficients

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        # The controller removed: every gate 1, each block unscaled.
        w = self.lm_head.weight
        return [torch.ones(self.n_groups, dtype=w.dtype, device=w.device)
                for _ in range(2 * self.n_layers)]

    @torch.jit.export
    def count(self, ids: Tensor, coefficients: List[Tensor], mode: str) -> Tuple[int, float]:
        # Blocks run x tokens and matmul FLOPs (2 per multiply-add) of one call, as
        # the native family counts them: attention scores and context over the full
        # T x T; the controller only when it runs; no head in "record".
        B, T = ids.shape[0], ids.shape[1]
        D, Fd = self.d_model, self.d_ff
        per_layer = 2 * (3 * D * D + D * D + D * Fd + Fd * D) + 4 * T * D
        controller = 2 * (D * self.width + self.width * 2 * self.n_groups)
        head = 2 * D * self.vocab_size
        if mode == "replay":
            flops = self.n_layers * per_layer + head
        elif mode == "live":
            flops = self.n_layers * (per_layer + controller) + head
        else:
            flops = self.n_layers * controller + (self.n_layers - 1) * per_layer
        blocks = self.n_layers if mode != "record" else self.n_layers - 1
        return blocks * B * T, float(flops * B * T)
