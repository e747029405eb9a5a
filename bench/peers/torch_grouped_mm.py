#!/usr/bin/env python3
"""Peer timings for `nvfp4moe bench --device cuda`: torch._grouped_mm with BF16
weights on the same presets, token counts and routing distributions.

Two numbers per case, both from CUDA-event-timed replays with the inputs (and
routings) rotated over four sets so that L2 does not hold them; the figure is
the mean over the four sets of each one's median, as in nvfp4moe's bench:
  gemm  torch._grouped_mm on rows already sorted by expert (GEMM only), the
        gate_up (N = 2F, K = H) or down (N = H, K = F) matmul;
  layer the whole torch BF16 MoE layer pipeline: sort by expert, gather,
        grouped_mm gate_up, silu(g) * u, grouped_mm down, weighted combine.

Routing follows the bench's definitions (uniform: k distinct experts per token;
zipf:S: experts ranked by a random popularity order, p(rank r) ~ 1/r^S, k
distinct), drawn with numpy from --seed, so the distribution matches the bench
though the ids themselves differ.

Writes one JSON record per case (--json) with the same keys as the bench's
records where they mean the same thing (preset, op, tokens, routing, us).
"""
import argparse
import json
import sys
import time

import numpy as np

PRESETS = {
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "gpt-oss-20b": (32, 4, 2880, 2880),
    "gpt-oss-120b": (128, 4, 2880, 2880),
    "deepseek-v3": (256, 8, 7168, 2048),
    "mixtral-8x7b": (8, 2, 4096, 14336),
}


def routing(kind, tokens, k, experts, rng):
    if kind == "balanced":
        # As nvfp4moe's bench: pair i * k + j of a shuffled token order goes to
        # a shuffled expert (i * k + j) % E, so every expert gets T * k / E +- 1.
        expert = rng.permutation(experts)
        token = rng.permutation(tokens)
        ids = np.empty((tokens, k), dtype=np.int32)
        ids[token] = expert[(np.arange(tokens)[:, None] * k + np.arange(k)[None, :]) % experts]
        return ids
    if kind == "uniform":
        p = np.full(experts, 1.0 / experts)
    else:
        s = float(kind.split(":")[1])
        ranks = rng.permutation(experts)
        w = 1.0 / np.arange(1, experts + 1) ** s
        p = np.empty(experts)
        p[ranks] = w / w.sum()
    return np.stack([rng.choice(experts, size=k, replace=False, p=p) for _ in range(tokens)]).astype(np.int32)


def median_us(torch, fn, reps, warmup=3, min_warmup_s=0.030, groups=4):
    """Mean over the `groups` input sets (call i uses set i % groups) of the
    median of each set's event-timed calls, out of reps calls after at least
    `warmup` calls and min_warmup_s of wall time: the rules of nvfp4moe's own
    bench (bench_support.hpp, mean_of_group_medians), so that a case is timed
    at the clocks its own load settles to and routings of different cost do
    not make the figure jump between modes."""
    i, start_wall = 0, time.perf_counter()
    while i < warmup or time.perf_counter() - start_wall < min_warmup_s:
        fn(i)
        torch.cuda.synchronize()
        i += 1
    times = []
    for r in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i + r)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    medians = [np.median(times[g::groups]) for g in range(groups) if times[g::groups]]
    return float(np.mean(medians))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-30b-a3b", help="comma list or 'all'")
    ap.add_argument("--tokens", default="1,16,128,512,2048")
    ap.add_argument("--routing", default="uniform", help="comma list of uniform | balanced | zipf:S")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20250101)
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("torch_grouped_mm.py: no CUDA device")
    dev = torch.device("cuda")
    presets = list(PRESETS) if args.preset == "all" else args.preset.split(",")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    records = []
    for name in presets:
        E, k, H, F = PRESETS[name]
        # Weight copies so that a rotation spans at least 3x the L2.
        per_copy = E * 3 * F * H * 2
        copies = int(min(4, max(1, -(-3 * l2 // per_copy))))
        w_gu = [torch.randn(E, 2 * F, H, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        w_dn = [torch.randn(E, H, F, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        for T in (int(t) for t in args.tokens.split(",")):
            for kind in args.routing.split(","):
                rng = np.random.default_rng(args.seed)
                ids = [torch.from_numpy(routing(kind, T, k, E, rng)).to(dev) for _ in range(4)]
                xs = [torch.randn(T, H, device=dev, dtype=torch.bfloat16) for _ in range(4)]

                def plan(r):
                    flat = ids[r].flatten()
                    order = torch.argsort(flat, stable=True)
                    counts = torch.bincount(flat, minlength=E)
                    offs = torch.cumsum(counts, 0).to(torch.int32)
                    return order, offs

                def layer(i):
                    r = i % 4
                    order, offs = plan(r)
                    rows = xs[r][order // k]
                    gu = torch._grouped_mm(rows, w_gu[i % copies].transpose(-2, -1), offs=offs)
                    h = torch.nn.functional.silu(gu[:, :F]) * gu[:, F:]
                    y = torch._grouped_mm(h, w_dn[i % copies].transpose(-2, -1), offs=offs)
                    out = torch.empty_like(y)
                    out[order] = y
                    return out.view(T, k, H).sum(1)

                for op, w, K in (("gate_up", w_gu, H), ("down", w_dn, F)):
                    sorted_rows = [torch.randn(T * k, K, device=dev, dtype=torch.bfloat16) for _ in range(4)]
                    offs = [plan(r)[1] for r in range(4)]

                    def gemm(i, w=w, sorted_rows=sorted_rows, offs=offs):
                        return torch._grouped_mm(sorted_rows[i % 4], w[i % copies].transpose(-2, -1), offs=offs[i % 4])

                    us = median_us(torch, gemm, args.reps)
                    N = 2 * F if op == "gate_up" else H
                    records.append({"preset": name, "op": op, "tokens": T, "routing": kind, "peer": "torch_grouped_mm",
                                    "us": us, "tflops": 2.0 * T * k * N * K / us * 1e-6})
                us = median_us(torch, layer, args.reps)
                records.append({"preset": name, "op": "layer", "tokens": T, "routing": kind,
                                "peer": "torch_bf16_layer", "us": us, "tokens_per_s": T / us * 1e6})
                print(f"{name} T={T} {kind}: " + ", ".join(f"{r['op']} {r['us']:.1f} us" for r in records[-3:]),
                      file=sys.stderr)
    meta = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "records": records}, f, indent=1)
    for r in records:
        print(f"| {r['preset']} | {r['op']} | {r['tokens']} | {r['routing']} | {r['peer']} | {r['us']:.1f} |")


if __name__ == "__main__":
    main()
