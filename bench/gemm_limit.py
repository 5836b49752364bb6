#!/usr/bin/env python3
"""The FLOP limit of this machine for one model's shapes (bench/audit_vs_eager.sh).

Times, with the same libtorch as fca (Debian's python3-torch 1.13), every matmul
shape of one forward of a dense/featuregate model folder at the audit's batch
(B windows of T tokens: B*T rows): the linears as F.linear without bias
([B*T, in] x [in, out]: qkv, attn.out, mlp.fc1, mlp.fc2, ctrl.fc1, ctrl.fc2,
lm_head) and the two attention batched matmuls ([B*H, T, hd] x [B*H, hd, T] and
[B*H, T, T] x [B*H, T, hd]), in each dtype, two ways: one GEMM at a time on the
--threads torch threads, and --threads single-threaded GEMMs at once (Python
threads; torch releases the GIL), the way an engine that runs batches in parallel
uses the cores. A shape's rate is the better of the two, each the best of --reps
timed repetitions long enough to time well (the best: on a shared machine many
repetitions share the cores with someone else, and two OpenMP threads that wait
for each other at every barrier suffer most). Prints GFLOP/s per shape and:

  peak  the best GFLOP/s of any of the model's shapes: the limit the audit is
        held to (FLOP/s a GEMM of the model's own shapes reaches here);
  mix   the forward's matmul FLOPs over the time they take at each shape's best
        rate (LIVE and REPLAY): what a forward made of nothing but these GEMMs
        would reach; always <= peak.

A square 1024^3 GEMM is timed too, for information (not part of the limit).
--json writes everything.
"""
import argparse
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def shapes(cfg, B, T):
    D, H = cfg["d_model"], cfg["n_heads"]
    hd = D // H
    out = [  # name, kind, dims, calls per forward
        ("attn.qkv", "linear", (B * T, D, 3 * D), cfg["n_layers"]),
        ("attn.out", "linear", (B * T, D, D), cfg["n_layers"]),
        ("mlp.fc1", "linear", (B * T, D, cfg["d_ff"]), cfg["n_layers"]),
        ("mlp.fc2", "linear", (B * T, cfg["d_ff"], D), cfg["n_layers"]),
        ("attn.scores", "bmm", (B * H, T, hd, T), cfg["n_layers"]),
        ("attn.context", "bmm", (B * H, T, T, hd), cfg["n_layers"]),
        ("lm_head", "linear", (B * T, D, cfg["vocab_size"]), 1),
    ]
    if cfg.get("model_type") == "featuregate":
        C, G = cfg["controller_width"], cfg["n_groups"]
        out += [("ctrl.fc1", "linear", (B * T, D, C), cfg["n_layers"]),
                ("ctrl.fc2", "linear", (B * T, C, 2 * G), cfg["n_layers"])]
    return out


def make(kind, dims, dtype):
    g = torch.Generator().manual_seed(0)
    if kind == "linear":
        m, k, n = dims
        x, w = torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
        return (lambda: F.linear(x, w)), 2.0 * m * k * n
    b, m, k, n = dims
    x, y = torch.randn(b, m, k, generator=g).to(dtype), torch.randn(b, k, n, generator=g).to(dtype)
    return (lambda: torch.matmul(x, y)), 2.0 * b * m * k * n


def best_rate(fn, flops, reps, min_seconds, workers=1, pool=None):
    """GFLOP/s and seconds per GEMM, best of `reps` timed repetitions: one GEMM at a
    time on the torch threads set (workers=1), or `workers` single-threaded GEMMs at
    once on `pool`'s threads (torch releases the GIL in them)."""
    one = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        one = min(one, time.perf_counter() - t0)
    one = max(one, 1e-7)
    iters = max(1, int(math.ceil(min_seconds / one)))

    def loop():
        torch.set_num_threads(1)
        with torch.inference_mode():
            for _ in range(iters):
                fn()

    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        if workers == 1:
            for _ in range(iters):
                fn()
        else:
            for f in [pool.submit(loop) for _ in range(workers)]:
                f.result()
        best = min(best, (time.perf_counter() - t0) / (iters * workers))
    return flops / best / 1e9, best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model folder (config.json)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rep_seconds", type=float, default=0.02,
                    help="each timed repetition runs at least this long")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    B, T = args.batch, args.window
    report = {"threads": torch.get_num_threads(), "torch_version": torch.__version__,
              "batch": B, "window": T, "dtypes": {}}
    pool = ThreadPoolExecutor(args.threads) if args.threads > 1 else None
    with torch.inference_mode():
        for name in args.dtypes.split(","):
            dtype = DTYPES[name]
            rows = []
            for sname, kind, dims, calls in shapes(cfg, B, T):
                fn, flops = make(kind, dims, dtype)
                g_omp, s_omp = best_rate(fn, flops, args.reps, args.rep_seconds)
                g_conc, s_conc = g_omp, s_omp
                if pool is not None:
                    torch.set_num_threads(1)
                    g_conc, s_conc = best_rate(fn, flops, args.reps, args.rep_seconds,
                                               args.threads, pool)
                    torch.set_num_threads(args.threads)
                rows.append({"shape": sname, "kind": kind, "dims": list(dims), "calls": calls,
                             "flops": flops, "seconds": min(s_omp, s_conc),
                             "gflops": max(g_omp, g_conc), "gflops_threads": g_omp,
                             "gflops_concurrent": g_conc})
            fn, flops = make("linear", (1024, 1024, 1024), dtype)
            square, _ = best_rate(fn, flops, args.reps, args.rep_seconds)
            peak = max(r["gflops"] for r in rows)

            def mix(live):
                use = [r for r in rows if live or not r["shape"].startswith("ctrl.")]
                return (sum(r["flops"] * r["calls"] for r in use) /
                        sum(r["seconds"] * r["calls"] for r in use) / 1e9)

            report["dtypes"][name] = {"shapes": rows, "peak_gflops": peak,
                                      "mix_live_gflops": mix(True),
                                      "mix_replay_gflops": mix(False),
                                      "square_1024_gflops": square}
            print(f"GEMM {name:8s} ({report['threads']} threads, rows = {B}x{T}; one GEMM on "
                  f"{report['threads']} threads / {report['threads']} single-threaded at once): " +
                  ", ".join(f"{r['shape']} {r['gflops_threads']:.0f}/{r['gflops_concurrent']:.0f}"
                            for r in rows) +
                  f" GFLOP/s; peak {peak:.1f}, forward mix {mix(True):.1f} (LIVE) "
                  f"{mix(False):.1f} (REPLAY); square 1024^3 {square:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
