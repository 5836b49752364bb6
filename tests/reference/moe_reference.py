#!/usr/bin/env python3
"""Reference vectors for the `olmoe`, `qwen2_moe` and `mixtral` families
(docs/moe.md).

An eager forward of our own, written from a reading of Hugging Face's
modeling_olmoe.py, modeling_qwen2_moe.py and modeling_mixtral.py (conventions
pinned in
docs/moe.md), run with Debian's python3-torch (libtorch 1.13, the library the
engine links). For each family it writes a tiny random checkpoint with the
real tensor names and config.json keys, and the expected outputs on one fixed
batch, in float32 and in bfloat16:

  tests/data/<family>-tiny/config.json
  tests/data/<family>-tiny/model.safetensors     (float32 weights)
  tests/data/<family>-tiny/expected.safetensors           (libtorch 1.13)
  tests/data/<family>-tiny/expected-torch2.safetensors    (a 2.x torch)
      input_ids                  int64 [B, T]
      <dtype>.logits             float32 [B, T, V]     (dtype: float32, bfloat16)
      <dtype>.router.<l>         float32 [B, T, E]     router probabilities
      <dtype>.shared_gate.<l>    float32 [B, T, 1]     qwen2_moe only
      <dtype>.experts.<l>        int64 [B, T, k]       chosen experts, by weight

Run with Debian's interpreter (python3-torch):
  /usr/bin/python3 tests/reference/moe_reference.py
and with a 2.x torch, whose CPU kernels round bfloat16 otherwise (2.6 and 2.14
write the same bytes): the python3 of scripts/device/chroot_check.sh's chroot,
  chroot out/chroot-trixie python3 /src/tests/reference/moe_reference.py
(with /proc mounted; it writes the chroot's copy of tests/data).
Deterministic (fixed seeds); rerunning rewrites identical files.
"""

import json
import math
import os
import struct

import torch

B, T = 2, 12
# The vectors of the libtorch line that runs this (moe_test reads the one of
# the line the engine is built with).
EXPECTED = "expected.safetensors" if torch.__version__.startswith("1.") else "expected-torch2.safetensors"

CONFIGS = {
    "olmoe": {
        "architectures": ["OlmoeForCausalLM"],
        "model_type": "olmoe",
        "vocab_size": 256,
        "hidden_size": 16,
        "intermediate_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "clip_qkv": None,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    },
    "qwen2_moe": {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "vocab_size": 256,
        "hidden_size": 16,
        "intermediate_size": 24,
        "moe_intermediate_size": 8,
        "shared_expert_intermediate_size": 12,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    },
    "mixtral": {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": 256,
        "hidden_size": 16,
        "intermediate_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    },
}


# Per family, so that adding one leaves the others' files as they were.
SEEDS = {"olmoe": 0, "qwen2_moe": 1, "mixtral": 2}


def num_experts(c):
    return c["num_local_experts"] if c["model_type"] == "mixtral" else c["num_experts"]


def moe_prefix(c):
    """Where a layer's router and experts live in the state dict."""
    return "block_sparse_moe." if c["model_type"] == "mixtral" else "mlp."


def expert_names(c):
    """(gate, up, down) projection names of one expert."""
    if c["model_type"] == "mixtral":
        return ("w1", "w3", "w2")
    return ("gate_proj", "up_proj", "down_proj")


def state_dict_shapes(c):
    """The Hugging Face state dict: name -> shape, in a fixed order."""
    d, v = c["hidden_size"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // heads
    olmoe = c["model_type"] == "olmoe"
    qwen = c["model_type"] == "qwen2_moe"
    width = c["moe_intermediate_size"] if qwen else c["intermediate_size"]
    gate, up, down = expert_names(c)
    m = moe_prefix(c)
    s = {"model.embed_tokens.weight": (v, d)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = (d,)
        s[p + "post_attention_layernorm.weight"] = (d,)
        s[p + "self_attn.q_proj.weight"] = (heads * hd, d)
        s[p + "self_attn.k_proj.weight"] = (kv * hd, d)
        s[p + "self_attn.v_proj.weight"] = (kv * hd, d)
        s[p + "self_attn.o_proj.weight"] = (d, heads * hd)
        if olmoe:
            s[p + "self_attn.q_norm.weight"] = (heads * hd,)
            s[p + "self_attn.k_norm.weight"] = (kv * hd,)
        if qwen:
            s[p + "self_attn.q_proj.bias"] = (heads * hd,)
            s[p + "self_attn.k_proj.bias"] = (kv * hd,)
            s[p + "self_attn.v_proj.bias"] = (kv * hd,)
        s[p + m + "gate.weight"] = (num_experts(c), d)
        for e in range(num_experts(c)):
            s[p + m + f"experts.{e}.{gate}.weight"] = (width, d)
            s[p + m + f"experts.{e}.{up}.weight"] = (width, d)
            s[p + m + f"experts.{e}.{down}.weight"] = (d, width)
        if qwen:
            sw = c["shared_expert_intermediate_size"]
            s[p + "mlp.shared_expert.gate_proj.weight"] = (sw, d)
            s[p + "mlp.shared_expert.up_proj.weight"] = (sw, d)
            s[p + "mlp.shared_expert.down_proj.weight"] = (d, sw)
            s[p + "mlp.shared_expert_gate.weight"] = (1, d)
    s["model.norm.weight"] = (d,)
    s["lm_head.weight"] = (v, d)
    return s


def random_weights(c, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in state_dict_shapes(c).items():
        if name.endswith("norm.weight") or "layernorm" in name:
            # Around 1, so the norms' weights matter.
            w[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            w[name] = 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("gate.weight") and "experts" not in name and "shared" not in name:
            # A router with logits of order 1: probabilities far from uniform.
            w[name] = 0.5 * torch.randn(shape, generator=g)
        else:
            w[name] = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    return w


# --- the forward pass -------------------------------------------------------


def rms_norm(x, weight, eps):
    # Upcast, normalise, round back to the input dtype, then the weight.
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope(c, t, dtype):
    hd = c["hidden_size"] // c["num_attention_heads"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    angles = torch.arange(t).float()[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def attention(c, w, p, x, cos, sin):
    b, t, d = x.shape
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // heads

    def proj(name):
        return torch.nn.functional.linear(x, w[p + name + ".weight"], w.get(p + name + ".bias"))

    q, k, v = proj("self_attn.q_proj"), proj("self_attn.k_proj"), proj("self_attn.v_proj")
    if c["model_type"] == "olmoe":
        # q_norm/k_norm over the whole projection, before the heads split.
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], c["rms_norm_eps"])
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], c["rms_norm_eps"])
    q = rotate(q.view(b, t, heads, hd).transpose(1, 2), cos, sin)
    k = rotate(k.view(b, t, kv, hd).transpose(1, 2), cos, sin)
    v = v.view(b, t, kv, hd).transpose(1, 2)
    rep = heads // kv
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
    mask = torch.full((t, t), torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device).triu(1)
    scores = scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, heads * hd)
    return torch.nn.functional.linear(out, w[p + "self_attn.o_proj.weight"])


def swiglu(w, prefix, x, names=("gate_proj", "up_proj", "down_proj")):
    lin = torch.nn.functional.linear
    g = lin(x, w[prefix + "." + names[0] + ".weight"])
    u = lin(x, w[prefix + "." + names[1] + ".weight"])
    return lin(torch.nn.functional.silu(g) * u, w[prefix + "." + names[2] + ".weight"])


def moe(c, w, p, x, record):
    n, d = x.shape
    k, num = c["num_experts_per_tok"], num_experts(c)
    m = moe_prefix(c)
    logits = torch.nn.functional.linear(x, w[p + m + "gate.weight"])
    probs = torch.softmax(logits, dim=1, dtype=torch.float32)
    record["router"] = probs
    # Top-k by a stable descending sort: equal probabilities go to the lower
    # expert index (docs/moe.md; torch.topk leaves that order unspecified).
    values, experts = torch.sort(probs, dim=-1, descending=True, stable=True)
    weights, experts = values[:, :k], experts[:, :k]
    record["experts"] = experts
    # Mixtral always renormalises the chosen probabilities.
    if c.get("norm_topk_prob", c["model_type"] == "mixtral"):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(num):
        slot, token = torch.where(experts.t() == e)
        if token.numel() == 0:
            continue
        y = swiglu(w, p + m + f"experts.{e}", x[token], expert_names(c)) * weights[token, slot, None]
        out.index_add_(0, token, y)
    if c["model_type"] == "qwen2_moe":
        gate = torch.sigmoid(torch.nn.functional.linear(x, w[p + "mlp.shared_expert_gate.weight"]))
        record["shared_gate"] = gate
        out = out + gate * swiglu(w, p + "mlp.shared_expert", x)
    return out


def forward(c, w, ids):
    """Logits [B, T, V] and, per layer, what the router did."""
    b, t = ids.shape
    dtype = w["model.embed_tokens.weight"].dtype
    h = w["model.embed_tokens.weight"][ids]
    cos, sin = (r.to(ids.device) for r in rope(c, t, dtype))
    records = []
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        eps = c["rms_norm_eps"]
        h = h + attention(c, w, p, rms_norm(h, w[p + "input_layernorm.weight"], eps), cos, sin)
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps).view(b * t, -1)
        record = {}
        h = h + moe(c, w, p, x, record).view(b, t, -1)
        records.append(record)
    h = rms_norm(h, w["model.norm.weight"], c["rms_norm_eps"])
    return torch.nn.functional.linear(h, w["lm_head.weight"]), records


# --- files ------------------------------------------------------------------

DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        data = t.numpy().tobytes()
        header[name] = {
            "dtype": DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    torch.set_num_threads(1)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    for family, c in CONFIGS.items():
        seed = SEEDS[family]
        folder = os.path.join(root, family.replace("_", "-") + "-tiny")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
            f.write("\n")
        w = random_weights(c, 1000 + seed)
        write_safetensors(os.path.join(folder, "model.safetensors"), w)
        g = torch.Generator().manual_seed(2000 + seed)
        ids = torch.randint(0, c["vocab_size"], (B, T), generator=g)
        expected = {"input_ids": ids}
        for dtype, tag in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
            with torch.no_grad():
                logits, records = forward(c, {n: t.to(dtype) for n, t in w.items()}, ids)
            expected[f"{tag}.logits"] = logits.float()
            for l, r in enumerate(records):
                expected[f"{tag}.router.{l}"] = r["router"].view(B, T, -1)
                expected[f"{tag}.experts.{l}"] = r["experts"].view(B, T, -1)
                if "shared_gate" in r:
                    expected[f"{tag}.shared_gate.{l}"] = r["shared_gate"].float().view(B, T, 1)
        write_safetensors(os.path.join(folder, EXPECTED), expected)
        print(folder, "written")


if __name__ == "__main__":
    main()
