"""A tiny mixture-of-experts byte-level language model for fca's `torchscript` family.

Pre-LN blocks with learned positions; each block's MLP is a mixture of n_experts
GELU experts. The router of block l reads LN2(x) and gives, per token, the
probabilities p = softmax(W_r LN2(x)) over the experts: those are the coefficients
(site router.l, family "router", n_experts channels). The top_k experts with the
largest coefficients run on a token (the others are skipped: real work not done),
and their outputs are mixed with the selected coefficients renormalized to sum 1.

So an audit asks the paper's questions of routing: how much the routing varies
across inputs and tokens, how much the frozen model depends on which token gets
which experts, and how much work is skipped (top_k of n_experts expert MLPs run).

The methods are the contract of docs/torchscript.md; `record` is left out on
purpose (fca then records with `live`).
"""
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# The same causal attention, GELU MLP (an expert here) and embedding.
from featuregate_ts import Attention, embed_with_positions
from featuregate_ts import Mlp as Expert


class MoeBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList([Expert(d_model, d_ff) for _ in range(n_experts)])

    def attend(self, x: Tensor, mask: Tensor) -> Tensor:
        return x + self.attn(self.ln1(x), mask)

    def route(self, x: Tensor) -> Tensor:
        """The controller: router probabilities [B, T, n_experts] for block input x
        (after attention)."""
        return torch.softmax(self.router(self.ln2(x)), dim=-1)

    def mix(self, x: Tensor, p: Tensor) -> Tensor:
        """x + the experts' outputs mixed by coefficients p; only the top_k experts
        of each token run."""
        B, T, D = x.shape
        h = self.ln2(x).reshape(B * T, D)
        weights, chosen = torch.topk(p.reshape(B * T, -1), self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        y = torch.zeros_like(h)
        e = 0
        for expert in self.experts:
            hit = chosen == e
            rows = hit.any(-1).nonzero().squeeze(-1)
            if rows.numel() > 0:
                w = (weights * hit.to(weights.dtype)).sum(-1).index_select(0, rows)
                y.index_add_(0, rows, expert(h.index_select(0, rows)) * w.unsqueeze(-1))
            e += 1
        return x + y.view(B, T, D)


class MoeLM(nn.Module):
    def __init__(self, vocab_size: int = 256, max_seq_len: int = 128, d_model: int = 128,
                 n_layers: int = 2, n_heads: int = 4, d_ff: int = 256, n_experts: int = 4,
                 top_k: int = 2):
        super().__init__()
        self.n_layers = n_layers
        self.n_experts = n_experts
        self.top_k = top_k
        self.d_model = d_model
        self.d_ff = d_ff
        self.vocab_size = vocab_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(
            [MoeBlock(d_model, n_heads, d_ff, n_experts, top_k) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def embed(self, ids: Tensor) -> Tuple[Tensor, Tensor]:
        return embed_with_positions(self.tok_emb.weight, self.pos_emb.weight, ids)

    # ---- the contract (docs/torchscript.md)

    @torch.jit.export
    def live(self, ids: Tensor) -> Tuple[Tensor, List[Tensor]]:
        x, mask = self.embed(ids)
        coefficients: List[Tensor] = []
        for block in self.blocks:
            x = block.attend(x, mask)
            p = block.route(x)
            coefficients.append(p)
            x = block.mix(x, p)
        return self.lm_head(self.ln_f(x)), coefficients

    @torch.jit.export
    def replay(self, ids: Tensor, coefficients: List[Tensor]) -> Tensor:
        # The routers do not run: each block routes by its given coefficients.
        x, mask = self.embed(ids)
        i = 0
        for block in self.blocks:
            x = block.mix(block.attend(x, mask), coefficients[i])
            i += 1
        return self.lm_head(self.ln_f(x))

    @torch.jit.export
    def neutral(self) -> List[Tensor]:
        # No router: equal probabilities. top_k then takes the lowest-numbered
        # experts (torch.topk's order among ties), a fixed routing for every token.
        w = self.lm_head.weight
        return [torch.full([self.n_experts], 1.0 / self.n_experts, dtype=w.dtype,
                           device=w.device) for _ in range(self.n_layers)]

    @torch.jit.export
    def count(self, ids: Tensor, coefficients: List[Tensor], mode: str) -> Tuple[int, float]:
        # Blocks are expert MLPs (config.json: blocks_per_token = n_layers * n_experts):
        # top_k of them run per token and layer. FLOPs: 2 per multiply-add of the
        # matmuls that ran (the router only when it runs).
        tokens = ids.shape[0] * ids.shape[1]
        T, D, Fd = ids.shape[1], self.d_model, self.d_ff
        per_layer = 2 * (4 * D * D) + 4 * T * D + self.top_k * 2 * (2 * D * Fd)
        if mode != "replay":
            per_layer += 2 * D * self.n_experts
        flops = self.n_layers * per_layer + 2 * D * self.vocab_size
        return self.n_layers * self.top_k * tokens, float(flops * tokens)

    # ---- training only (not part of the contract)

    def forward(self, ids: Tensor) -> Tuple[Tensor, Tensor]:
        """Logits and the Switch-Transformer load-balancing loss (for training)."""
        logits, coefficients = self.live(ids)
        balance = torch.zeros((), dtype=logits.dtype)
        for p in coefficients:
            flat = p.reshape(-1, self.n_experts)
            chosen = torch.topk(flat, self.top_k, dim=-1)[1]
            load = F.one_hot(chosen, self.n_experts).sum(1).to(flat.dtype).mean(0) / self.top_k
            balance = balance + self.n_experts * (load * flat.mean(0)).sum()
        return logits, balance / self.n_layers
