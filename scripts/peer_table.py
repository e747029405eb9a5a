#!/usr/bin/env python3
"""nvfp4moe against the team's peer measurements on an H200 (bench/peers/h200-2026-11-30.md: ggml's NVFP4
MUL_MAT_ID, torch BF16 and FP8 grouped GEMMs, one sitting), from results files of scripts/gpu-check.sh.
   scripts/peer_table.py bench/peers/h200-2026-11-30.md bench/results/DECODE.json bench/results/PREFILL.json
Each cell is our TFLOP/s over the peer's (> 1: nvfp4moe faster), same shape, T and routing, compact schedule,
BF16 activations. Ours is `us` (the median of single-call graph replays, its launch included) unless
--in-graph asks for `us_in_graph` (per call in a graph of 8, where the bench times one: T <= 32). The peers and we
ran in different sittings: ratios within ~10% are not evidence."""
import json
import re
import sys

COLUMNS = ("ggml NVFP4", "torch BF16 GEMM", "torch BF16 full", "torch FP8 GEMM")


def read_peers(path):
    peers = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or not re.match(r"\d+$", cells[1]):
            continue
        preset, op = cells[0].split(".")
        values = [float(c.split()[0]) for c in cells[3:]]
        peers[(preset, op, int(cells[1]), cells[2])] = dict(zip(COLUMNS, values))
    return peers


def main():
    args = [a for a in sys.argv[1:] if a != "--in-graph"]
    in_graph = "--in-graph" in sys.argv
    peers = read_peers(args[0])
    ours = {}
    for path in args[1:]:
        for b in json.load(open(path))["bench"]:
            if b.get("schedule") == "compact" and not b.get("unfused") and b["op"] in ("gate_up", "down"):
                ours[(b["preset"], b["op"], b["tokens"], b["routing"])] = b
    print("| shape | T | routing | nvfp4moe TFLOP/s | " + " | ".join("vs " + c for c in COLUMNS) + " |")
    print("| --- | ---: | --- | ---: | " + " | ".join("---:" for _ in COLUMNS) + " |")
    for key in sorted(peers):
        b = ours.get(key)
        if b is None:
            continue
        us = b.get("us_in_graph") if in_graph and b.get("us_in_graph") else b["us"]
        tflops = b["flops"] / us * 1e-6
        cells = [f"{key[0]}.{key[1]}", str(key[2]), key[3], f"{tflops:.1f}"]
        cells += [f"{tflops / peers[key][c]:.2f}×" for c in COLUMNS]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
