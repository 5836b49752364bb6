#!/usr/bin/env python3
"""OLMoE-1B-7B at full size, for bench/olmoe_1b7b.sh.

  olmoe_1b7b.py write DIR      a random checkpoint with OLMoE-1B-7B's config
                               keys, tensor names, shapes and bfloat16 dtype
                               (6.92B parameters, 13.8 GB, three shards and
                               model.safetensors.index.json, as published)
  olmoe_1b7b.py eager DIR --seq=T --repeats=N --threads=K --json=FILE
                               an eager PyTorch forward of that folder: the
                               weights memory-mapped, the forward of
                               tests/reference/moe_reference.py (written from
                               Hugging Face's modeling_olmoe.py; the experts
                               loop gathers each expert's tokens, as there)
  olmoe_1b7b.py eager --random --device=cuda ...
                               the same forward on random weights made on
                               the device (no folder): for a GPU's figure
  olmoe_1b7b.py gemm --seq=T --repeats=N --threads=K --json=FILE
                               the GEMM floor: only the matrix products of
                               one forward at OLMoE-1B-7B's shapes and dtype
                               (each expert's rows the even split k T / E),
                               through the same torch calls as eager, with
                               random weights of one layer reused by every
                               layer (still far larger than the caches): no
                               forward of these GEMMs can be faster
  olmoe_1b7b.py summary FCA_JSON EAGER_JSON [FCA_JSON EAGER_JSON ...]
          [--gpu=GPU_EAGER_JSON] [--gemm=GEMM_JSON ...]
                               the figures side by side, one pair per round
                               and thread count, the targets of issue 24
                               item 7 (on the median over rounds), and
                               what a 64-window audit would take (an
                               estimate, from these figures)

Random weights route tokens about evenly over the experts, as a trained
router roughly does under its load-balancing loss; what is timed does not
depend on the values otherwise.
"""

import argparse
import json
import math
import os
import resource
import sys
import time
import warnings
from statistics import median  # of an even count: the mean of the middle two

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import moe_reference  # noqa: E402

# allenai/OLMoE-1B-7B-0924's config.json (the keys fca reads, and the rest as
# published, so a folder with the real weights reads the same).
CONFIG = {
    "architectures": ["OlmoeForCausalLM"],
    "model_type": "olmoe",
    "vocab_size": 50304,
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "clip_qkv": None,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "norm_topk_prob": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.01,
    "tie_word_embeddings": False,
    "pad_token_id": 1,
    "eos_token_id": 50279,
    "bos_token_id": None,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
}
SHARDS = 3


def shard_plan(shapes):
    """Names in order, cut into SHARDS files of about equal bytes."""
    sizes = {n: 2 * math.prod(s) for n, s in shapes.items()}
    total, target = sum(sizes.values()), sum(sizes.values()) / SHARDS
    plan, current, acc = [[]], 0, 0
    for name, size in sizes.items():
        if acc >= target * (current + 1) and current < SHARDS - 1:
            plan.append([])
            current += 1
        plan[-1].append(name)
        acc += size
    return plan, total


def random_tensor(name, shape, g):
    if name.endswith("norm.weight") or "layernorm" in name:
        t = 1.0 + 0.1 * torch.randn(shape, generator=g)
    elif name.endswith("mlp.gate.weight"):
        t = 0.5 * torch.randn(shape, generator=g)  # router logits of order 1
    else:
        t = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    return t.to(torch.bfloat16)


def write(folder):
    os.makedirs(folder, exist_ok=True)
    shapes = moe_reference.state_dict_shapes(CONFIG)
    plan, total = shard_plan(shapes)
    g = torch.Generator().manual_seed(1)
    weight_map = {}
    for i, names in enumerate(plan):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, len(plan))
        header, offset = {}, 0
        for n in names:
            size = 2 * math.prod(shapes[n])
            header[n] = {"dtype": "BF16", "shape": list(shapes[n]), "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[n] = file
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for n in names:  # one tensor in memory at a time
                f.write(random_tensor(n, shapes[n], g).view(torch.int16).numpy().tobytes())
        print("wrote", file, "(%.2f GB)" % (offset / 1e9), flush=True)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    print("parameters %d, %.2f GB" % (total // 2, total / 1e9))


def load_mapped(folder):
    """Every tensor of the folder, memory-mapped (bfloat16, no copy)."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    w = {}
    for file in files:
        path = os.path.join(folder, file)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        # Read-only on purpose: torch warns that it cannot write to it.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, h in header.items():
            if name == "__metadata__":
                continue
            a, b = h["data_offsets"]
            data = raw[8 + n + a:8 + n + b].view(np.int16)
            w[name] = torch.from_numpy(data).view(torch.bfloat16).view(h["shape"])
    return w


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def random_on(device):
    """OLMoE-1B-7B's tensors, random, made on the device."""
    g = torch.Generator(device=device).manual_seed(1)
    w = {}
    for name, shape in moe_reference.state_dict_shapes(CONFIG).items():
        w[name] = (torch.randn(shape, generator=g, device=device) / math.sqrt(shape[-1])).to(torch.bfloat16)
    return w


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def eager(folder, seq, repeats, json_path, device, threads):
    torch.set_num_threads(threads or os.cpu_count())
    t0 = time.perf_counter()
    if folder:
        with open(os.path.join(folder, "config.json")) as f:
            c = json.load(f)
        w = load_mapped(folder)
    else:
        c, w = CONFIG, random_on(device)
    load_s = time.perf_counter() - t0
    ids = torch.randint(0, c["vocab_size"], (1, seq), generator=torch.Generator().manual_seed(0)).to(device)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first forward pages the weights in
            synchronize(device)
            t = time.perf_counter()
            logits, _ = moe_reference.forward(c, w, ids)
            synchronize(device)
            times.append(time.perf_counter() - t)
    first, times = times[0], sorted(times[1:])
    result = {"load_s": load_s, "seq": seq, "repeats": repeats, "forward_s": times[len(times) // 2],
              "first_forward_s": first, "peak_rss_bytes": peak_rss_bytes(),
              "finite": bool(torch.isfinite(logits.float()).all()), "threads": torch.get_num_threads(),
              "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
              "torch": torch.__version__}
    print(json.dumps(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f)


def median_time(run, repeats):
    """The median wall time of `repeats` calls after one untimed call (the
    allocator and the caches)."""
    run()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return median(times)


def gemm_floor(seq, repeats, json_path, threads):
    """Times the matrix products of one forward (see the module's doc)."""
    torch.set_num_threads(threads or os.cpu_count())
    c, bf16 = CONFIG, torch.bfloat16
    d, width, heads = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    experts, k, hd = c["num_experts"], c["num_experts_per_tok"], d // heads
    rows = max(1, k * seq // experts)
    g = torch.Generator().manual_seed(1)

    def rand(*shape):
        return (torch.randn(shape, generator=g) / math.sqrt(shape[-1])).to(bf16)

    attn = [rand(d, d) for _ in range(4)]
    router = rand(experts, d)
    mlps = [(rand(width, d), rand(width, d), rand(d, width)) for _ in range(experts)]
    head = rand(c["vocab_size"], d)
    x, xe, he = rand(seq, d), rand(rows, d), rand(rows, width)
    q, kt, probs = rand(heads, seq, hd), rand(heads, hd, seq), rand(heads, seq, seq)
    lin = torch.nn.functional.linear

    def forward():
        for _ in range(c["num_hidden_layers"]):
            for wt in attn:
                lin(x, wt)
            torch.matmul(q, kt)
            torch.matmul(probs, q)
            lin(x, router)
            for gate, up, down in mlps:
                lin(xe, gate)
                lin(xe, up)
                lin(he, down)
        lin(x, head)

    # One layer's up projections: each expert over its own rows, against one
    # GEMM over all their rows (what grouping the experts' rows could reach).
    x_all = rand(experts * rows, d)

    def per_expert():
        for gate, _, _ in mlps:
            lin(xe, gate)

    def grouped():
        lin(x_all, mlps[0][0])

    with torch.no_grad():
        forward_s = median_time(forward, repeats)
        flops = 2.0 * experts * rows * d * width
        per_expert_gflops = flops / median_time(per_expert, repeats) / 1e9
        grouped_gflops = flops / median_time(grouped, repeats) / 1e9
    result = {"seq": seq, "repeats": repeats, "forward_s": forward_s, "expert_rows": rows,
              "per_expert_gflops": per_expert_gflops, "one_gemm_gflops": grouped_gflops,
              "threads": torch.get_num_threads(), "torch": torch.__version__}
    print(json.dumps(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f)


# A default audit of a MoE: one recording pass over E and one over C, and a
# replay over E for each default intervention besides `correct` (which is the
# recording): cross_input, token_shuffle, static_layer,
# static_layer_position, global_mean, static_token, static_token_position,
# neutral, random_route (common/vocabulary.h).
REPLAYS = 9
WINDOWS = 64
# fca's LIVE tokens/s over eager's at each thread count (issue 41).
TARGET_OVER_EAGER = 2.5


def processor():
    """The processor's model name, family and model, and its avx512*/amx*
    flags: a figure is read against the kernels this processor can run."""
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if key.strip() == "flags":
                break
    flags = [x for x in fields.get("flags", "").split() if x.startswith(("avx512", "amx"))]
    return "%s (family %s, model %s); %s; %d CPUs" % (
        fields.get("model name", "?"), fields.get("cpu family", "?"), fields.get("model", "?"),
        " ".join(flags) or "no avx512*/amx* flags", os.cpu_count())


def gemm_lines(gemm_jsons, rounds):
    """Per thread count, the GEMM floor's tokens/s (median over its runs)
    beside fca's and eager's medians: how near each side runs to the floor,
    and the most a forward of these GEMMs could beat eager by."""
    floors = {}
    for path in gemm_jsons:
        with open(path) as f:
            g = json.load(f)
        floors.setdefault(g["threads"], []).append(g)
    if not floors:
        return []
    first = next(iter(floors.values()))[0]
    lines = ["  GEMM floor: only the forward's matrix products, the same torch calls as eager, each expert "
             "over the even split of %d rows (bench/olmoe_1b7b.py gemm)" % first["expert_rows"],
             "  threads  runs  floor tok/s  fca LIVE / floor  eager / floor  most a forward of these calls beats eager by"]
    for threads, runs in sorted(floors.items()):
        floor = first["seq"] / median([r["forward_s"] for r in runs])
        pairs_k = rounds.get(threads, [])
        if not pairs_k:
            continue
        live = median([first["seq"] / fca["live_s"] for fca, _ in pairs_k])
        ref = median([first["seq"] / eager["forward_s"] for _, eager in pairs_k])
        lines.append("  %-8d %-5d %-12.1f %-16s %-14s %.2fx"
                     % (threads, len(runs), floor, "%.1f%%" % (100 * live / floor), "%.1f%%" % (100 * ref / floor),
                        floor / ref))
        if "one_gemm_gflops" in runs[0]:
            lines.append("  %d threads: one layer's expert up projections %.0f GFLOP/s each over its own %d rows, "
                         "%.0f GFLOP/s as one GEMM over all their rows (median over runs)"
                         % (threads, median([r["per_expert_gflops"] for r in runs]), first["expert_rows"],
                            median([r["one_gemm_gflops"] for r in runs])))
    return lines


def summary(pairs, gpu_json, gemm_jsons):
    """`pairs`: (fca JSON, eager JSON) files, one pair per round and thread
    count. Ratios are taken within a round (the two ran one after the
    other), then their median over the rounds of a thread count.
    `gemm_jsons`: the GEMM floor's runs, any number per thread count."""
    runs = []
    for fca_json, eager_json in pairs:
        with open(fca_json) as f, open(eager_json) as g:
            runs.append((json.load(f), json.load(g)))
    fca0 = runs[0][0]
    t, gb = fca0["seq"], 1e9
    load_ratio = max(fca["rss_after_load_bytes"] for fca, _ in runs) / fca0["weight_bytes"]
    forwards = WINDOWS * (2 + REPLAYS)
    rounds = {}
    for fca, eager in runs:
        rounds.setdefault(fca["threads"], []).append((fca, eager))
    lines = [
        "OLMoE-1B-7B (random weights, real names and shapes), bfloat16, T = %d; each run the median of %d forwards"
        % (t, fca0["repeats"]),
        "  measured %s on %s" % (time.strftime("%Y-%m-%d"), processor()),
        "  parameters %d, weights %.2f GB" % (fca0["parameters"], fca0["weight_bytes"] / gb),
        "  fca load %.1f..%.1f s over %d runs; peak RSS after load at most %.3fx the weights (target <= 1.1x: %s)"
        % (min(fca["load_s"] for fca, _ in runs), max(fca["load_s"] for fca, _ in runs), len(runs), load_ratio,
           "met" if load_ratio <= 1.1 else "MISSED"),
        "  fca peak RSS after the forwards at most %.3fx the weights; eager peak RSS %.2f GB (weights mapped)"
        % (max(fca["peak_rss_bytes"] for fca, _ in runs) / fca0["weight_bytes"],
           max(eager["peak_rss_bytes"] for _, eager in runs) / gb),
        "  REPLAY of the recording %s LIVE in every run; eager PyTorch is torch %s running the forward of"
        % ("bitwise equals" if all(fca["replay_bitwise"] for fca, _ in runs) else "DIFFERS from",
           runs[0][1]["torch"]),
        "  tests/reference/moe_reference.py; fca and eager alternate, one process at a time, with the same threads",
        "  threads  rounds  fca LIVE tok/s  fca REPLAY tok/s  eager tok/s  LIVE/eager, per round     median (target >= %gx)"
        "  REPLAY/eager median" % TARGET_OVER_EAGER,
    ]
    slowest = []
    for threads, pairs_k in sorted(rounds.items()):
        live = [t / fca["live_s"] for fca, _ in pairs_k]
        replay = [t / fca["replay_s"] for fca, _ in pairs_k]
        ref = [t / eager["forward_s"] for _, eager in pairs_k]
        ratios = [a / b for a, b in zip(live, ref)]
        slowest.append(median([max(fca["live_s"], fca["replay_s"]) for fca, _ in pairs_k]))
        lines.append(
            "  %-8d %-7d %-15.1f %-17.1f %-12.1f %-25s %.2fx %-12s %.2fx"
            % (threads, len(pairs_k), median(live), median(replay), median(ref),
               " ".join("%.2f" % r for r in ratios), median(ratios),
               "met" if median(ratios) >= TARGET_OVER_EAGER else "MISSED", median([a / b for a, b in zip(replay, ref)])))
    lines += gemm_lines(gemm_jsons, rounds)
    lines += [
        "estimate, not a measurement: a default audit of %d windows of %d tokens runs about %d forwards"
        % (WINDOWS, t, forwards),
        "  (recording over E and C, %d replays over E; the float32 flip-rate pass and timing not counted)" % REPLAYS,
        "  here, at the slower of fca's LIVE and REPLAY with the best thread count (median): %.0f min"
        % (forwards * min(slowest) / 60),
    ]
    if gpu_json:
        with open(gpu_json) as f:
            gpu = json.load(f)
        if gpu["seq"] == t:
            lines.append(
                "  on a GPU lab server, if fca's forward ran as fast as this eager forward does on an %s "
                "(%.3f s, measured; torch %s): %.1f min. fca's engine runs on the CPU today."
                % (gpu["device"], gpu["forward_s"], gpu["torch"], forwards * gpu["forward_s"] / 60))
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["write", "eager", "gemm", "summary"])
    p.add_argument("folder", nargs="?", default="")
    p.add_argument("more", nargs="*", help="summary: EAGER_JSON [FCA_JSON EAGER_JSON ...]")
    p.add_argument("--gpu", default="", help="summary: the GPU's eager JSON")
    p.add_argument("--gemm", action="append", default=[], help="summary: a GEMM floor JSON (repeatable)")
    p.add_argument("--random", action="store_true", help="eager: random weights, no folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default="")
    p.add_argument("--threads", type=int, default=0, help="eager: torch threads (0 = one per core)")
    a = p.parse_args()
    if not a.folder and not (a.command == "eager" and a.random) and a.command != "gemm":
        p.error("a folder is needed (or eager --random)")
    if a.command == "summary":
        files = [a.folder] + a.more
        if len(files) % 2:
            p.error("summary FCA_JSON EAGER_JSON [FCA_JSON EAGER_JSON ...] [--gpu=GPU_EAGER_JSON]")
        summary(list(zip(files[::2], files[1::2])), a.gpu, a.gemm)
    elif a.command == "gemm":
        gemm_floor(a.seq, a.repeats, a.json, a.threads)
    elif a.command == "write":
        write(a.folder)
    else:
        eager("" if a.random else a.folder, a.seq, a.repeats, a.json, a.device, a.threads)


if __name__ == "__main__":
    main()
