#!/usr/bin/env python3
"""Exports the TorchScript examples of docs/torchscript.md into model folders.

  export.py featuregate --model=models/featuregate-s1 --out=examples/models/featuregate-s1-ts
      The bundled featuregate-s1 (its config.json and model.safetensors), re-expressed
      as a TorchScript module (featuregate_ts.py) with the same weights.
  export.py moe --train=out/demo/data/train.txt --out=examples/models/moe-tiny
      A tiny mixture-of-experts LM (moe_ts.py), trained briefly on the training part of
      the fortunes corpus (`fca-train split` writes it), then exported.

Each folder gets model.pt (torch.jit.script(...).save) and config.json
(model_type "torchscript" and the coefficient sites). Needs Debian's python3-torch
(libtorch 1.13, the library fca-server uses). Deterministic for a seed, up to the
floating-point order of torch's kernels.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

from eager_audit import load_safetensors  # noqa: E402
from featuregate_ts import FeatureGateLM  # noqa: E402
from moe_ts import MoeLM  # noqa: E402


def write_folder(out, module, config):
    os.makedirs(out, exist_ok=True)
    scripted = torch.jit.script(module.eval())
    scripted.save(os.path.join(out, "model.pt"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"wrote {out}/model.pt ({os.path.getsize(os.path.join(out, 'model.pt'))} bytes) "
          f"and config.json")


def sites(names_and_channels):
    return [{"name": f"{family}.{layer}", "family": family, "layer": layer, "channels": channels}
            for family, layer, channels in names_and_channels]


def export_featuregate(args):
    with open(os.path.join(args.model, "config.json")) as f:
        c = json.load(f)
    if c["model_type"] != "featuregate":
        raise SystemExit(f"{args.model}: model_type {c['model_type']}, not featuregate")
    weights = load_safetensors(os.path.join(args.model, "model.safetensors"))
    dtypes = {v.dtype for v in weights.values()}
    if len(dtypes) != 1:
        raise SystemExit(f"{args.model}: weights of several dtypes {dtypes}")
    # Saved in the checkpoint's dtype (bfloat16 here); fca converts the module
    # to the compute dtype at load, as it converts the native family's weights.
    dtype = dtypes.pop()
    module = FeatureGateLM(c).to(dtype)
    module.load_state_dict(weights, strict=True)
    L, G = c["n_layers"], c["n_groups"]
    site_list = []
    for layer in range(L):
        site_list += [("attn_gate", layer, G), ("mlp_gate", layer, G)]
    write_folder(args.out, module, {
        "model_type": "torchscript",
        "description": f"{os.path.basename(os.path.normpath(args.model))} (featuregate) "
                       "re-expressed in TorchScript: examples/torchscript/featuregate_ts.py",
        "vocab_size": c["vocab_size"],
        "max_seq_len": c["max_seq_len"],
        "num_layers": L,
        "dtype": str(dtype).replace("torch.", ""),
        "sites": sites(site_list),
    })


def batches(data, T, batch, steps, generator):
    n = data.numel() - T - 1
    for _ in range(steps):
        start = torch.randint(0, n, (batch,), generator=generator)
        yield torch.stack([data[s:s + T] for s in start.tolist()])


def train_moe(model, train_path, steps, batch, T, lr):
    with open(train_path, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.1)
    start = time.time()
    for step, ids in enumerate(batches(data, T, batch, steps, g)):
        logits, balance = model(ids)
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                              ids[:, 1:].reshape(-1))
        loss = nll + 0.01 * balance
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step + 1 == steps:
            print(f"step {step:4d}  nll {nll.item():.4f}  balance {balance.item():.4f}  "
                  f"{time.time() - start:.0f} s", flush=True)


def export_moe(args):
    torch.manual_seed(args.seed)
    model = MoeLM(top_k=args.top_k, n_experts=args.experts)
    train_moe(model, args.train, args.steps, args.batch, 128, args.lr)
    write_folder(args.out, model, {
        "model_type": "torchscript",
        "description": f"tiny mixture-of-experts LM, top-{args.top_k} of {args.experts} "
                       f"experts, {args.steps} steps on {os.path.basename(args.train)}: "
                       "examples/torchscript/moe_ts.py",
        "vocab_size": 256,
        "max_seq_len": 128,
        "num_layers": model.n_layers,
        "blocks_per_token": model.n_layers * model.n_experts,
        "dtype": "float32",
        "sites": sites([("router", layer, model.n_experts) for layer in range(model.n_layers)]),
    })


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    fg = sub.add_parser("featuregate")
    fg.add_argument("--model", required=True)
    fg.add_argument("--out", required=True)
    moe = sub.add_parser("moe")
    moe.add_argument("--train", required=True)
    moe.add_argument("--out", required=True)
    moe.add_argument("--steps", type=int, default=600)
    moe.add_argument("--batch", type=int, default=16)
    moe.add_argument("--lr", type=float, default=3e-3)
    moe.add_argument("--experts", type=int, default=4)
    moe.add_argument("--top_k", type=int, default=2)
    moe.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(2)
    export_featuregate(args) if args.what == "featuregate" else export_moe(args)


if __name__ == "__main__":
    main()
