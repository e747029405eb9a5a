#!/usr/bin/env python3
"""Experiment only: a makespan model of the compact schedule's item queue (132 SMs, each taking the next item when
free), items costing 128 + width units per K block (the wide kernel's cost model, perf.md Next item 12), over the
plan's jobs from 2026-12-08-jobs-dump.cpp. For each of the bench's four routings it prints the makespan in the
plan's job order (base), with the regular jobs longest first (lpt), with every item longest first (lptall), and the
work bound (total units / 132); then the makespan with every job's K split in 1-4 equal parts (no split overhead).
A model, not a measurement: it ignores the epilogue, the launches' overlap and any split's reduction.
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
