#!/usr/bin/env python3
"""PyTorch-eager reference of one FCA audit (docs/fca.md), for bench/audit_vs_eager.sh.

A plain, reasonable eager implementation of the whole audit that
`fca-local-audit audit --models=DIR --eval=E --calib=C` runs for one `featuregate`
model folder (config.json + model.safetensors), written from docs/fca.md:

  windows    byte tokens (ByteTokenizer: id = byte value), consecutive non-overlapping
             T-token windows from the start, remainder dropped, the first max_windows
             kept (0 = all); E and C must not share a window.
  LIVE       LIVE+record over E in batches, each batch replayed right away with its own
             coefficients (`correct`) and fidelity-checked (max |dlogit| <= 1e-5;
             --fidelity_check_every=k: every k-th batch only); LIVE+record over C.
  stats      calibration statistics in float64: mu_s, mu_{s,t}, m_f, and the
             per-token table of static_token.
  replays    the 7 other interventions, each a REPLAY over all of E (the controller
             does not run): cross_input, token_shuffle, static_layer,
             static_layer_position, global_mean, static_token, neutral.
  metrics    NLL per intervention (log_softmax in float32), paired bootstrap 95% CIs
             of the penalties (1000 resamples), gap retention (+ bootstrap CI),
             variation (eta2, eta2_layer, variance split, per-site mean/variance).
  execution  counted FLOPs per token (LIVE and REPLAY) on the first batch of E: one
             LIVE and one REPLAY forward, as fca's execution audit runs them
             (--timing_repeats=0: no timed forwards).

The forward is the `featuregate` network of server/engine/models/transformer_net.cc:
pre-LN blocks, controller g = 2*sigmoid(W2 gelu(W1 LN_c(h) + b1) + b2), attention
gate g[:G] and MLP gate g[G:] scaling d_model/G channels each, causal softmax
attention, GELU MLP, final LN and an untied lm_head.

Only the random streams differ from fca (torch.Generator instead of fca's
xoshiro256**): the cross_input derangement, the token_shuffle permutations and the
bootstrap resamples. Every deterministic number (NLL of correct, static_layer,
static_layer_position, global_mean, static_token, neutral; eta2) is the same work.
--rng=fca reproduces fca's streams in pure Python (slower; for cross-checks only).

Uses only torch and the standard library (no safetensors package).
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

INTERVENTIONS = ["correct", "cross_input", "token_shuffle", "static_layer",
                 "static_layer_position", "global_mean", "static_token", "neutral"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
             "F64": torch.float64}


# ---------------------------------------------------------------- model loading

def load_safetensors(path):
    """name -> tensor, parsed by hand: u64 LE header length, JSON header, raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = bytearray(blob[8 + n:])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = ST_DTYPES[info["dtype"]]
        t = torch.frombuffer(data, dtype=dtype, count=(end - begin) // torch.empty((), dtype=dtype).element_size(),
                             offset=begin) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


class FeatureGate:
    def __init__(self, model_dir, dtype):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        if c["model_type"] != "featuregate":
            raise SystemExit("eager_audit.py audits featuregate models only, not " + c["model_type"])
        self.D, self.L, self.H = c["d_model"], c["n_layers"], c["n_heads"]
        self.Fd, self.G, self.C = c["d_ff"], c["n_groups"], c["controller_width"]
        self.V, self.max_len, self.eps = c["vocab_size"], c["max_seq_len"], c["norm_eps"]
        w = {k: v.to(dtype) for k, v in load_safetensors(
            os.path.join(model_dir, "model.safetensors")).items()}
        self.w = w
        self.params = sum(v.numel() for v in w.values())
        self.dtype = dtype
        self.sites = []  # (name, family, layer, channels)
        for l in range(self.L):
            self.sites.append((f"attn_gate.{l}", "attn_gate", l, self.G))
            self.sites.append((f"mlp_gate.{l}", "mlp_gate", l, self.G))
        self._mask = {}

    def causal(self, T):
        if T not in self._mask:
            self._mask[T] = torch.full((T, T), float("-inf"), dtype=self.dtype).triu(1)
        return self._mask[T]

    def ln(self, x, name):
        return F.layer_norm(x, (self.D,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def lin(self, x, name, bias=True):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"] if bias else None)

    def gate(self, y, g):
        B, T, D = y.shape
        return (y.view(B, T, self.G, D // self.G) * g.unsqueeze(-1)).view(B, T, D)

    def forward(self, ids, coeff=None, record=None):
        """Logits [B, T, V]. coeff=None: LIVE (gates appended to `record` if given);
        otherwise REPLAY with coeff[2l], coeff[2l+1] (anything broadcastable to
        [B, T, G]) and the controller does not run."""
        B, T = ids.shape
        H, hd = self.H, self.D // self.H
        x = F.embedding(ids, self.w["tok_emb.weight"]) + self.w["pos_emb.weight"][:T]
        mask = self.causal(T)
        for l in range(self.L):
            p = f"blocks.{l}."
            if coeff is None:
                u = F.gelu(self.lin(self.ln(x, p + "ctrl.ln"), p + "ctrl.fc1"))
                g = 2.0 * torch.sigmoid(self.lin(u, p + "ctrl.fc2"))
                ga, gm = g[..., :self.G], g[..., self.G:]
                if record is not None:
                    record += [ga.contiguous(), gm.contiguous()]
            else:
                ga, gm = coeff[2 * l], coeff[2 * l + 1]
            qkv = self.lin(self.ln(x, p + "ln1"), p + "attn.qkv")
            q, k, v = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hd)) + mask, dim=-1)
            a = self.lin((att @ v).transpose(1, 2).reshape(B, T, self.D), p + "attn.out")
            x = x + self.gate(a, ga)
            m = self.lin(F.gelu(self.lin(self.ln(x, p + "ln2"), p + "mlp.fc1")), p + "mlp.fc2")
            x = x + self.gate(m, gm)
        return F.linear(self.ln(x, "ln_f"), self.w["lm_head.weight"])

    def flops_per_token(self, T, live):
        """Matmul FLOPs per token as transformer_net.cc counts them (2 per MAC,
        attention scores and context over the full T x T)."""
        D, Fd = self.D, self.Fd
        per_layer = 2 * (3 * D * D + D * D + D * Fd + Fd * D) + 4 * T * D
        if live:
            per_layer += 2 * (D * self.C + self.C * 2 * self.G)
        return self.L * per_layer + 2 * D * self.V


# ---------------------------------------------------------------- data

def windows(path, T, max_windows):
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // T
    if max_windows > 0:
        n = min(n, max_windows)
    if n == 0:
        raise SystemExit(f"{path}: not one window of {T} tokens")
    ids = torch.frombuffer(bytearray(data[:n * T]), dtype=torch.uint8).view(n, T).long()
    return ids, hashlib.sha256(data).hexdigest()


def check_no_overlap(e, c):
    calib = {bytes(row.to(torch.uint8).tolist()) for row in c}
    shared = sum(bytes(row.to(torch.uint8).tolist()) in calib for row in e)
    if shared:
        raise SystemExit(f"calibration and evaluation share {shared} window(s)")


def seq_nll(logits, ids):
    """Mean next-token NLL per sequence over positions 1..T-1, log_softmax in float32."""
    lp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1).double().mean(1)


# ---------------------------------------------------------------- random streams

class TorchRng:
    """The reference's own random streams (torch.Generator, seeded per purpose)."""

    def __init__(self, seed):
        self.seed = seed

    def gen(self, purpose):
        g = torch.Generator()
        g.manual_seed((self.seed * 1000003 + sum(map(ord, purpose)) * 7919) % (2 ** 63))
        return g

    def derangement(self, n):
        g = self.gen("cross_input")
        while True:
            p = torch.randperm(n, generator=g)
            if not bool((p == torch.arange(n)).any()):
                return p

    def permutations(self, n, T):
        g = self.gen("token_shuffle")
        return torch.stack([torch.randperm(T, generator=g) for _ in range(n)])

    def bootstrap_indices(self, purpose, resamples, n):
        return torch.randint(n, (resamples, n), generator=self.gen(purpose))


class FcaRng:
    """fca's streams (common/random.cc: SplitMix64-seeded xoshiro256**, FNV-1a
    purposes), in pure Python: the same derangement, permutations and resamples."""
    M = (1 << 64) - 1

    def __init__(self, seed):
        self.seed = seed

    @staticmethod
    def _splitmix(x):
        x = (x + 0x9e3779b97f4a7c15) & FcaRng.M
        z = x
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & FcaRng.M
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & FcaRng.M
        return x, z ^ (z >> 31)

    @staticmethod
    def derive(seed, purpose, index=0):
        h = 1469598103934665603
        for ch in purpose.encode():
            h = ((h ^ ch) * 1099511628211) & FcaRng.M
        x = seed ^ h ^ ((index * 0x9e3779b97f4a7c15) & FcaRng.M)
        return FcaRng._splitmix(x)[1]

    class _X:
        def __init__(self, seed):
            self.s = []
            for _ in range(4):
                seed, v = FcaRng._splitmix(seed)
                self.s.append(v)

        def next(self):
            M, s = FcaRng.M, self.s
            r = ((((s[1] * 5) & M) << 7 | ((s[1] * 5) & M) >> 57) & M) * 9 & M
            t = (s[1] << 17) & M
            s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t
            s[3] = ((s[3] << 45) | (s[3] >> 19)) & M
            return r

        def uniform(self, n):
            limit = FcaRng.M - FcaRng.M % n
            while True:
                x = self.next()
                if x < limit:
                    return x % n

        def permutation(self, n):
            p = list(range(n))
            for i in range(n - 1, 0, -1):
                j = self.uniform(i + 1)
                p[i], p[j] = p[j], p[i]
            return p

    def derangement(self, n):
        r = self._X(self.derive(self.seed, "cross_input"))
        while True:
            p = r.permutation(n)
            if all(p[i] != i for i in range(n)):
                return torch.tensor(p)

    def permutations(self, n, T):
        out = []
        for i in range(n):
            per_seq = self.derive(self.seed, "token_shuffle", i)
            out.append(self._X(self.derive(per_seq, "site", 0)).permutation(T))
        return torch.tensor(out)

    def bootstrap_indices(self, purpose, resamples, n):
        r = self._X(self.derive(self.seed, purpose))
        return torch.tensor([[r.uniform(n) for _ in range(n)] for _ in range(resamples)])


# ---------------------------------------------------------------- statistics

def quantile7(sorted_vals, q):
    pos = q * (len(sorted_vals) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (pos - lo) * (sorted_vals[hi] - sorted_vals[lo])


def paired_ci(treated, ref, idx, level):
    means = (treated - ref)[idx].mean(1)
    return (torch.quantile(means, (1 - level) / 2).item(),
            torch.quantile(means, (1 + level) / 2).item())


def retention(g, p, c, min_gap):
    gap = g - c
    return None if not abs(gap) >= min_gap else 100.0 * (g - p) / gap


def retention_ci(g, p, c, idx, min_gap, level):
    gm, pm, cm = g[idx].mean(1), p[idx].mean(1), c[idx].mean(1)
    gap = gm - cm
    ok = gap.abs() >= min_gap
    if int(ok.sum()) < 0.95 * idx.shape[0] or int(ok.sum()) == 0:
        return None
    vals = sorted((100.0 * (gm - pm) / gap)[ok].tolist())
    return quantile7(vals, (1 - level) / 2), quantile7(vals, (1 + level) / 2)


def variation(eval_coeff, sites):
    """eta2 / eta2_layer per family and the variance split (docs/fca.md, float64)."""
    fam = {}
    for a, (_, family, _, _) in zip(eval_coeff, sites):
        f = fam.setdefault(family, {"sum": 0.0, "count": 0, "tot": 0.0, "lay": 0.0,
                                    "within": 0.0, "between": 0.0, "tokens": 0.0})
        f["sum"] += a.double().sum().item()
        f["count"] += a.numel()
    site_rows = []
    for a, (name, family, layer, _) in zip(eval_coeff, sites):
        a = a.double()
        f = fam[family]
        m_f = f["sum"] / f["count"]
        mu = a.mean((0, 1))
        seq = a.mean(1, keepdim=True)
        within = (a - mu).pow(2).sum().item()
        f["within"] += within
        f["between"] += (seq - mu).pow(2).sum().item() * a.shape[1]
        f["tokens"] += (a - seq).pow(2).sum().item()
        mu_s = a.mean().item()
        f["tot"] += (a - m_f).pow(2).sum().item()
        f["lay"] += (a - mu_s).pow(2).sum().item()
        site_rows.append({"site": name, "family": family, "layer": layer, "mean": mu_s,
                          "variance": within / a.numel()})
    out = {}
    for family, f in fam.items():
        n = float(f["count"])
        defined = f["tot"] > 1e-12 * n
        out[family] = {
            "eta2": 1.0 - f["within"] / f["tot"] if defined else None,
            "eta2_layer": 1.0 - f["lay"] / f["tot"] if defined else None,
            "total_variance": f["tot"] / n, "within_site_variance": f["within"] / n,
            "between_input_variance": f["between"] / n,
            "within_input_variance": f["tokens"] / n}
    return out, site_rows


# ---------------------------------------------------------------- the audit

def audit(model, e_ids, c_ids, args, rng):
    B, T = args.batch, args.window
    N, M = e_ids.shape[0], c_ids.shape[0]
    S = len(model.sites)
    nll = {}
    tokens = {"live": 0, "replay": 0}  # forward tokens by mode

    # LIVE+record over E, each batch replayed at once with its own coefficients.
    eval_coeff = [None] * S
    live, correct, fidelity, checked = [], [], 0.0, 0
    for b in range(0, N, B):
        ids = e_ids[b:b + B]
        rec = []
        live_logits = model.forward(ids, record=rec)
        tokens["live"] += ids.numel()
        live.append(seq_nll(live_logits, ids))
        if (b // B) % args.fidelity_check_every != 0:
            correct.append(live[-1])  # NLL(correct) = LIVE NLL on unsampled batches
        else:
            replay_logits = model.forward(ids, coeff=rec)
            tokens["replay"] += ids.numel()
            diff = (live_logits.float() - replay_logits.float()).abs().max().item()
            fidelity = max(fidelity, diff)
            checked += ids.shape[0]
            if diff > 1e-5:
                raise SystemExit(f"replay is not faithful: max |dlogit| = {diff:.3g} on windows "
                                 f"{b}..{b + ids.shape[0] - 1}")
            correct.append(seq_nll(replay_logits, ids))
        for s in range(S):
            if eval_coeff[s] is None:
                eval_coeff[s] = torch.empty((N, T, rec[s].shape[-1]), dtype=rec[s].dtype)
            eval_coeff[s][b:b + ids.shape[0]] = rec[s]
    live_nll = torch.cat(live).mean().item()
    nll["correct"] = torch.cat(correct)

    # LIVE+record over C.
    calib_coeff = [None] * S
    for b in range(0, M, B):
        ids = c_ids[b:b + B]
        rec = []
        model.forward(ids, record=rec)
        tokens["live"] += ids.numel()
        for s in range(S):
            if calib_coeff[s] is None:
                calib_coeff[s] = torch.empty((M, T, rec[s].shape[-1]), dtype=rec[s].dtype)
            calib_coeff[s][b:b + ids.shape[0]] = rec[s]

    # Calibration statistics (float64), then cast to the compute dtype.
    dt = model.dtype
    c64 = [a.double() for a in calib_coeff]
    mu_s = [a.mean((0, 1)) for a in c64]                      # [d]
    mu_st = [a.mean(0) for a in c64]                          # [T, d]
    fam_sum, fam_cnt = {}, {}
    for a, site in zip(c64, model.sites):
        fam_sum[site[1]] = fam_sum.get(site[1], 0.0) + a.sum().item()
        fam_cnt[site[1]] = fam_cnt.get(site[1], 0) + a.numel()
    m_f = [torch.tensor(fam_sum[s[1]] / fam_cnt[s[1]], dtype=torch.float64) for s in model.sites]
    # static_token (fca.md "Token-keyed profiles"): per token id the mean over C,
    # shrunk toward mu_s by w = n / (n + m) when seen n < m times (m =
    # static_token_min_count); an id C never has (w = 0) reads mu_s.
    flat_c = c_ids.reshape(-1)
    counts = torch.bincount(flat_c, minlength=model.V).double()
    seen = counts > 0
    m_count = args.static_token_min_count
    w = torch.where(counts >= m_count, torch.ones_like(counts), counts / (counts + m_count)).unsqueeze(1)
    token_table = []
    for a, m in zip(c64, mu_s):
        sums = torch.zeros(model.V, a.shape[-1], dtype=torch.float64).index_add_(
            0, flat_c, a.reshape(-1, a.shape[-1]))
        mean = sums / counts.clamp_min(1).unsqueeze(1)
        token_table.append((w * mean + (1 - w) * m).to(dt))
    unseen = ~seen[e_ids]
    coverage = {"unseen_token_positions": int(unseen.sum()),
                "unseen_token_ids": int(torch.unique(e_ids[unseen]).numel())}

    pi = rng.derangement(N)
    sigma = rng.permutations(N, T)
    profiles = {
        "static_layer": [m.to(dt) for m in mu_s],
        "static_layer_position": [m.to(dt) for m in mu_st],
        "global_mean": [m.to(dt) for m in m_f],
        "neutral": [torch.ones(s[3], dtype=dt) for s in model.sites],
    }

    def plan(name, b, e):
        if name == "cross_input":
            return [a[pi[b:e]] for a in eval_coeff]
        if name == "token_shuffle":
            idx = sigma[b:e].unsqueeze(-1)
            return [a[b:e].gather(1, idx.expand(-1, -1, a.shape[-1])) for a in eval_coeff]
        if name == "static_token":
            return [tab[e_ids[b:e]] for tab in token_table]
        return profiles[name]  # broadcast over [B, T, d]

    for name in INTERVENTIONS[1:]:
        out = []
        for b in range(0, N, B):
            ids = e_ids[b:b + B]
            out.append(seq_nll(model.forward(ids, coeff=plan(name, b, b + ids.shape[0])), ids))
            tokens["replay"] += ids.numel()
        nll[name] = torch.cat(out)

    # Metrics: NLL, penalties with paired bootstrap CIs, retention, variation.
    ref = nll["correct"]
    boot = rng.bootstrap_indices("bootstrap", args.bootstrap, N)
    results = {}
    for name in INTERVENTIONS:
        r = {"nll": nll[name].mean().item()}
        if name != "correct":
            r["penalty"] = r["nll"] - ref.mean().item()
            r["ci"] = paired_ci(nll[name], ref, boot, 0.95)
        results[name] = r
    ridx = rng.bootstrap_indices("retention", args.bootstrap, N)
    g = nll["global_mean"]
    for name in ("static_layer", "static_layer_position", "static_token"):
        results[name]["retention_pct"] = retention(g.mean().item(), nll[name].mean().item(),
                                                   ref.mean().item(), 1e-5)
        if results[name]["retention_pct"] is not None:
            results[name]["retention_ci"] = retention_ci(g, nll[name], ref, ridx, 1e-5, 0.95)
    results["static_token"].update(coverage)
    var, site_rows = variation(eval_coeff, model.sites)

    # Execution: one LIVE and one REPLAY forward of the first batch of E
    # (fca counts FLOPs while they run; here they are counted from the shapes).
    ids = e_ids[:B]
    model.forward(ids)
    model.forward(ids, coeff=[a[:ids.shape[0]] for a in eval_coeff])
    tokens["live"] += ids.numel()
    tokens["replay"] += ids.numel()
    f_live, f_replay = model.flops_per_token(T, True), model.flops_per_token(T, False)
    execution = {"flops_per_token": f_live, "replay_flops_per_token": f_replay,
                 "parameters": model.params}
    return {"interventions": results, "variation": var, "sites": site_rows,
            "live_nll": live_nll, "max_abs_logit_diff": fidelity,
            "fidelity_checked_windows": checked, "execution": execution,
            "live_tokens": tokens["live"], "replay_tokens": tokens["replay"],
            "forward_flops": tokens["live"] * f_live + tokens["replay"] * f_replay,
            "nll_per_sequence": {k: v.tolist() for k, v in nll.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="featuregate model folder")
    ap.add_argument("--eval", required=True, help="evaluation text file")
    ap.add_argument("--calib", required=True, help="calibration text file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--static_token_min_count", type=int, default=5,
                    help="static_token's shrinkage count m (fca's spec field of that name)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max_eval_windows", type=int, default=0, help="0 = all")
    ap.add_argument("--max_calib_windows", type=int, default=0, help="0 = all")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rng", choices=["torch", "fca"], default="torch",
                    help="torch: the reference's own streams; fca: fca's xoshiro streams "
                         "(pure Python, for cross-checks)")
    ap.add_argument("--fidelity_check_every", type=int, default=1,
                    help="replay (`correct`) and fidelity-check every k-th batch of E only; "
                         "the others take NLL(correct) = LIVE NLL (1 = every batch, as "
                         "docs/fca.md specified when this was written)")
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args()

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        model = FeatureGate(args.model, DTYPES[args.dtype])
        t_loaded = time.perf_counter()
        if args.window > model.max_len:
            raise SystemExit(f"window {args.window} exceeds max_seq_len {model.max_len}")
        e_ids, e_sha = windows(args.eval, args.window, args.max_eval_windows)
        c_ids, c_sha = windows(args.calib, args.window, args.max_calib_windows)
        check_no_overlap(e_ids, c_ids)
        rng = TorchRng(args.seed) if args.rng == "torch" else FcaRng(args.seed)
        report = audit(model, e_ids, c_ids, args, rng)
    t_end = time.perf_counter()

    print(f"eager audit of {args.model}: {args.dtype}, {torch.get_num_threads()} threads, "
          f"E = {e_ids.shape[0]}, C = {c_ids.shape[0]} windows of {args.window}, "
          f"replay fidelity max|dlogit| = {report['max_abs_logit_diff']:.2g}")
    for name, r in report["interventions"].items():
        extra = ""
        if "ci" in r:
            extra = f" {r['penalty']:+.4f} [{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}]"
        if r.get("retention_pct") is not None:
            extra += f"  retention {r['retention_pct']:.2f}%"
        print(f"   {name:22s} {r['nll']:.4f}{extra}")
    for family, v in report["variation"].items():
        print(f"   variation {family:10s} eta2_layer {v['eta2_layer']:.4f} eta2 {v['eta2']:.4f}")
    print(f"eager: audit {t_end - t_loaded:.3f} s (windows -> report), load {t_loaded - t_start:.3f} s,"
          f" {report['live_tokens']} LIVE + {report['replay_tokens']} REPLAY forward tokens")
    if args.json:
        report.update({"model": os.path.basename(os.path.normpath(args.model)),
                       "dtype": args.dtype, "threads": torch.get_num_threads(),
                       "torch_version": torch.__version__, "rng": args.rng,
                       "eval_windows": e_ids.shape[0], "calib_windows": c_ids.shape[0],
                       "window_length": args.window, "batch_size": args.batch,
                       "fidelity_check_every": args.fidelity_check_every,
                       "eval_dataset_sha256": e_sha, "calib_dataset_sha256": c_sha,
                       "audit_seconds": t_end - t_loaded, "load_seconds": t_loaded - t_start})
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
