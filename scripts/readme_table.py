#!/usr/bin/env python3
"""The README's results table from results files of scripts/gpu-check.sh (one run may be split over several calls,
for example decode and prefill token counts).
   scripts/readme_table.py bench/results/FILE.json [FILE.json ...]"""
import json
import sys

recs = {}
for path in sys.argv[1:]:
    for b in json.load(open(path))["bench"]:
        if "us" in b and b["routing"] == "uniform":
            recs[(b["preset"], b["op"], b["tokens"], b["schedule"], bool(b.get("unfused")))] = b
print("| preset | op | T | µs | µs in a graph of 8 | TFLOP/s | GB/s (NVFP4 hit) | roofline | vs cuBLAS BF16 | vs torch |"
      " compact vs rect | fused vs unfused |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for preset in ("qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "mixtral-8x7b"):
    for tokens, op in ((1, "gate_up"), (1, "layer"), (128, "gate_up"), (2048, "gate_up"), (2048, "layer"),
                       (8192, "gate_up")):
        c = recs.get((preset, op, tokens, "compact", False))
        if c is None:
            continue
        r = recs.get((preset, op, tokens, "rect", False))
        u = recs.get((preset, op, tokens, "compact", True))
        peer = c.get("x_vs_torch_layer" if op == "layer" else "x_vs_torch_gemm")
        cells = [preset, op, str(tokens), f"{c['us']:.1f}", f"{c['us_in_graph']:.1f}" if c.get("us_in_graph") else "",
                 f"{c['tflops']:.1f}", f"{c['gbps']:.0f}",
                 f"{c['roofline']:.2f}", f"{c['x_vs_cublas']:.2f}×" if c.get("x_vs_cublas") else "",
                 f"{peer:.2f}×" if peer else "", f"{r['us'] / c['us']:.2f}×" if r else "",
                 f"{u['us'] / c['us']:.2f}×" if u else ""]
        print("| " + " | ".join(cells) + " |")
