#!/usr/bin/env python3
"""Experiment only: a makespan model of the compact schedule's item queue (132 SMs, each taking the next item when
free), items costing 128 + width units per K block (the wide kernel's cost model, perf.md Next item 12), over the
plan's jobs from 2026-12-08-jobs-dump.cpp. For each of the bench's four routings it prints the makespan in the
plan's job order (base), with the regular jobs longest first (lpt), with every item longest first (lptall), and the
work bound (total units / 132); then the makespan with every job's K split in 1-4 equal parts (no split overhead).
Last, the order of qwen3 gate_up's three class launches at T = 2048 with Zipf(1.2) as one queue (the launches
overlap), with item costs in us from the class launches timed alone under ncu
(bench/results/2026-12-08-h100-f270dc3-class-durations.json): a regular item ~31 us at width 128 (scaled by
(128 + width) / 256), a broad item ~34 us, a light item ~19.5 us; the library's order, light first, light second,
every item longest first, and the work bound.
A model, not a measurement: it ignores the epilogue and any split's reduction, and, but for the last part, the
launches' overlap.
  2026-12-08-wave-model.py /tmp/jobs-dump
"""
import heapq
import subprocess
import sys

DUMP = sys.argv[1] if len(sys.argv) > 1 else "/tmp/jobs-dump"


def makespan(items, sms=132):
    h = [0.0] * sms
    for c in items:
        heapq.heappush(h, heapq.heappop(h) + c)
    return max(h)


def routings(args):
    out = subprocess.run([DUMP] + args, capture_output=True, text=True, check=True).stdout.split("\n")
    for line in out:
        if line:
            yield [(int(w), c) for _, w, c in (x.split(":") for x in line.split()[1:])]


def items(widths, n_tiles, split=1):
    return [(128 + w) / split for w in widths for _ in range(n_tiles * split)]


CASES = [  # name, jobs-dump args (E k T zipf light broad), N tiles of 256 rows
    ("mixtral down T=512 zipf", ["8", "2", "512", "1.2", "0", "160"], 4096 // 256),
    ("mixtral down T=512 uniform", ["8", "2", "512", "0", "0", "160"], 4096 // 256),
    ("mixtral gate_up T=512 zipf", ["8", "2", "512", "1.2", "0", "160"], 28672 // 256),
    ("qwen3 down T=2048 zipf", ["128", "8", "2048", "1.2", "32", "160"], 2048 // 256),
    ("deepseek down T=2048 zipf", ["256", "8", "2048", "1.2", "32", "160"], 7168 // 256),
]
for name, args, nt in CASES:
    for jobs in routings(args):
        reg = [w for w, c in jobs if c == "r"]
        rest = [w for w, c in jobs if c != "r"]
        base = makespan(items(reg, nt) + items(rest, nt))
        lpt = makespan(items(sorted(reg, reverse=True), nt) + items(rest, nt))
        lpt_all = makespan(sorted(items(reg, nt) + items(rest, nt), reverse=True))
        bound = sum(items(reg + rest, nt)) / 132
        splits = " ".join(f"{s}:{makespan(items(reg + rest, nt, s)):.0f}" for s in (1, 2, 3, 4))
        print(f"{name}: base {base:.0f} lpt {lpt:.0f} lptall {lpt_all:.0f} bound {bound:.0f} | K splits {splits}")

# The class launches' order (qwen3 gate_up, T = 2048, Zipf(1.2)).
for jobs in routings(["128", "8", "2048", "1.2", "32", "160"]):
    n_tiles = 1536 // 256
    reg = [31.0 * (128 + w) / 256 for w, c in jobs if c == "r" for _ in range(n_tiles)]
    broad = [34.0 for w, c in jobs if c == "b" for _ in range(n_tiles)]
    light = [19.5 for w, c in jobs if c == "l" for _ in range(n_tiles)]
    print(f"qwen3 gate_up T=2048 zipf classes, items regular {len(reg)} broad {len(broad)} light {len(light)}: "
          f"regular, broad, light {makespan(reg + broad + light):.0f}; "
          f"light first {makespan(light + reg + broad):.0f}; "
          f"light second {makespan(reg + light + broad):.0f}; "
          f"longest first {makespan(sorted(reg + broad + light, reverse=True)):.0f}; "
          f"bound {sum(reg + broad + light) / 132:.0f}")
