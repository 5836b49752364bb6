#!/usr/bin/env python3
"""Writes the model folders of tests/data/torchscript/ from modules.py (python3-torch 1.13).

Each folder: model.pt and config.json. `not-torchscript` holds an eager module saved
with torch.save (a pickle, not TorchScript); `garbage` holds bytes that are no zip.
Run from anywhere; the folders are committed (a few KB each).
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modules  # noqa: E402

CONFIG = {
    "model_type": "torchscript",
    "vocab_size": modules.VOCAB,
    "max_seq_len": 64,
    "num_layers": modules.LAYERS,
    "dtype": "float32",
    "sites": [{"name": f"gate.{l}", "family": "gate", "layer": l, "channels": modules.GROUPS}
              for l in range(modules.LAYERS)],
}

SCRIPTED = {
    "tiny-gate": modules.TinyGate,
    "no-replay": modules.NoReplay,
    "wrong-signature": modules.WrongSignature,
    "no-optional-methods": modules.NoOptionalMethods,
}


def folder(name):
    path = os.path.join(HERE, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    return path


def main():
    for name, cls in SCRIPTED.items():
        torch.manual_seed(7)  # the same weights in every folder
        torch.jit.script(cls().eval()).save(os.path.join(folder(name), "model.pt"))
    for defect in modules.DEFECTS:
        torch.manual_seed(7)
        module = modules.Defective(defect).eval()
        torch.jit.script(module).save(os.path.join(folder(defect), "model.pt"))
    torch.manual_seed(7)
    torch.save(modules.TinyGate(), os.path.join(folder("not-torchscript"), "model.pt"))
    with open(os.path.join(folder("garbage"), "model.pt"), "wb") as f:
        f.write(b"this is not a zip archive\n" * 8)
    print("wrote", len(SCRIPTED) + len(modules.DEFECTS) + 2, "folders under", HERE)


if __name__ == "__main__":
    main()
