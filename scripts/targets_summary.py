#!/usr/bin/env python3
"""The figures behind docs/perf.md's targets table, from results files of scripts/gpu-check.sh (decode and prefill
calls of one tree).
   scripts/targets_summary.py bench/results/FILE.json [FILE.json ...]
   scripts/targets_summary.py --roofline-table FILE.json [FILE.json ...]
Ranges are min–max over the cases named on each line (compact schedule unless a line says otherwise).
--roofline-table prints instead the roofline time of every preset, op and T with uniform routing, its bound, and
the measured fraction of it (per call in a graph of 8 up to T = 8, as target 3 counts it; single calls above)."""
import json
import sys

PRESETS = ("qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "mixtral-8x7b")
SHORT = {"qwen3-30b-a3b": "qwen3", "deepseek-v3": "deepseek", "gpt-oss-20b": "gpt-oss", "mixtral-8x7b": "mixtral"}


def load(paths):
    recs = {}
    for path in paths:
        for b in json.load(open(path))["bench"]:
            if "us" in b:
                recs[(b["preset"], b["op"], b["tokens"], b["routing"], b["schedule"], bool(b.get("unfused")))] = b
    return recs


def rng(values, fmt="{:.2f}"):
    values = [v for v in values if v is not None]
    return (fmt + "–" + fmt).format(min(values), max(values)) if values else "n/a"


def roofline_table(recs):
    tokens = sorted({t for (p, op, t, r, s, u) in recs})
    print("| preset | op | " + " | ".join(f"T = {t}" for t in tokens) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in tokens) + " |")
    for p in PRESETS:
        for op in ("gate_up", "down", "layer"):
            cells = []
            for t in tokens:
                b = recs.get((p, op, t, "uniform", "compact", False))
                if b is None:
                    cells.append("")
                    continue
                flop_us = b["flops"] / (b["peak_tflops"] * 1e6)
                byte_us = b["weight_bytes"] / (b["read_gbps"] * 1e3)
                roof_us = max(flop_us, byte_us)
                measured = b["us_in_graph"] if t <= 8 and b.get("us_in_graph") else b["us"]
                time = f"{roof_us:.3g}" if roof_us < 10 else f"{roof_us:.0f}"
                cells.append(f"{time} {'F' if flop_us > byte_us else 'B'} · {roof_us / measured:.2f}")
            print(f"| {SHORT[p]} | {op} | " + " | ".join(cells) + " |")


def main():
    if sys.argv[1:2] == ["--roofline-table"]:
        roofline_table(load(sys.argv[2:]))
        return
    recs = load(sys.argv[1:])

    def cases(preset=None, ops=("gate_up", "down"), tokens=None, routing=None, schedule="compact"):
        for (p, op, t, r, s, unfused), b in recs.items():
            if unfused or s != schedule or op not in ops:
                continue
            if (preset is None or p == preset) and (tokens is None or t in tokens) and (routing is None or r == routing):
                yield b

    print("1. prefill roofline (gate_up, down; both routings):")
    for t in (2048, 8192):
        per = ", ".join(f"{SHORT[p]} {rng(b['roofline'] for b in cases(p, tokens=(t,)))}" for p in PRESETS)
        torch = ", ".join(f"{SHORT[p]} {rng(b.get('x_vs_torch_gemm') for b in cases(p, tokens=(t,)))}×"
                          for p in PRESETS)
        print(f"   T={t}: {per}; against torch._grouped_mm: {torch}")
    print("2. middle roofline (gate_up, down, layer; both routings):")
    for t in (16, 128, 512):
        bs = list(cases(ops=("gate_up", "down", "layer"), tokens=(t,)))
        print(f"   T={t}: {rng(b['roofline'] for b in bs)} ({rng((b['gbps'] / 1000 for b in bs))} TB/s);"
              f" against torch._grouped_mm {rng(b.get('x_vs_torch_gemm') for b in bs)}×")
    print("3. decode roofline, T = 1-8 (gate_up, down, layer; uniform): single-call graph; per call in a graph of 8")
    for p in PRESETS:
        bs = list(cases(p, ops=("gate_up", "down", "layer"), tokens=(1, 2, 4, 8), routing="uniform"))
        graph = [b["roofline"] * b["us"] / b["us_in_graph"] for b in bs if b.get("us_in_graph")]
        # A plain read of the same bytes in a graph of 8 (read_floor_in_graph_us): its own roofline fraction, and
        # the op's time against it.
        floor = [b["roofline"] * b["us"] / b["read_floor_in_graph_us"] for b in bs if b.get("read_floor_in_graph_us")]
        vs_floor = [b["read_floor_in_graph_us"] / b["us_in_graph"] for b in bs if b.get("read_floor_in_graph_us")]
        print(f"   {p}: {rng(b['roofline'] for b in bs)}; {rng(graph)}; a plain read of the same bytes "
              f"{rng(floor)}, the op at {rng(vs_floor)} of that read's speed")
    print("4. Zipf(1.2) against uniform (uniform time / Zipf time - 1):")
    for p in PRESETS:
        cells = []
        for t in (512, 2048, 8192):
            for op in ("gate_up", "down", "layer"):
                u = recs.get((p, op, t, "uniform", "compact", False))
                z = recs.get((p, op, t, "zipf1.2", "compact", False))
                if u and z:
                    cells.append(f"{op} {t} {100 * (u['us'] / z['us'] - 1):+.0f}%")
        print(f"   {p}: " + ", ".join(cells))
    print("5. compact against rect (rect time / compact time):")
    for p in ("qwen3-30b-a3b", "deepseek-v3"):
        cells = []
        for op in ("gate_up", "down", "layer"):
            c = recs.get((p, op, 2048, "uniform", "compact", False))
            r = recs.get((p, op, 2048, "uniform", "rect", False))
            if c and r:
                cells.append(f"{op} {r['us'] / c['us']:.2f}×")
        print(f"   {p} T=2048: " + ", ".join(cells))
    slower = []
    for (p, op, t, r, s, unfused), c in sorted(recs.items()):
        rect = recs.get((p, op, t, r, "rect", unfused))
        if s == "compact" and not unfused and t >= 16 and rect and rect["us"] / c["us"] < 1.0:
            slower.append(f"{p} {op} T={t} {r} {rect['us'] / c['us']:.2f}×")
    print("   below 1.0 at T ≥ 16: " + ("; ".join(slower) if slower else "none"))
    print("6. fused layer at T = 2048 (uniform; Zipf in parentheses):")
    for p in PRESETS:
        cells = []
        for r in ("uniform", "zipf1.2"):
            c = recs.get((p, "layer", 2048, r, "compact", False))
            u = recs.get((p, "layer", 2048, r, "compact", True))
            if c and u:
                cells.append(f"{u['us'] / c['us']:.2f}× unfused, {c.get('x_vs_torch_layer', 0):.2f}× torch's layer")
        print(f"   {p}: " + " (".join(cells) + (")" if len(cells) > 1 else ""))
    t1 = [b.get("x_vs_torch_layer") for b in cases(ops=("layer",), tokens=(1,))]
    print(f"   T=1 against torch's layer: {rng(t1, '{:.1f}')}×")
    q = recs.get(("qwen3-30b-a3b", "gate_up", 2048, "uniform", "compact", False))
    if q:
        print(f"7. plan (qwen3, T=2048): {q.get('plan_in_graph_us', float('nan')):.1f} µs as a graph node,"
              f" {q.get('plan_us', float('nan')):.1f} µs as a graph of its own")


if __name__ == "__main__":
    main()
