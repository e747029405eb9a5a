#!/usr/bin/env python3
"""Experiment only: the order of qwen3 gate_up's three class launches at T = 2048 with Zipf(1.2), as one item queue
over 132 SMs (the launches overlap: each next launch's CTAs take SMs as the previous one's free). Item costs in us
from the class launches timed alone under ncu (bench/results/2026-12-08-h100-f270dc3-class-durations.json): a
regular item ~31 us at width 128 (scaled by (128 + width) / 256), a broad item ~34 us, a light item ~19.5 us.
Prints, per bench routing, the makespan in the library's order (regular, broad, light), light first, light second,
every item longest first, and the work bound. A model, not a measurement.
  2026-12-08-class-order-model.py /tmp/jobs-dump      (2026-12-08-jobs-dump.cpp)
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


out = subprocess.run([DUMP, "128", "8", "2048", "1.2", "32", "160"], capture_output=True, text=True, check=True)
for line in out.stdout.split("\n"):
    if not line:
        continue
    jobs = [(int(w), c) for _, w, c in (x.split(":") for x in line.split()[1:])]
    n_tiles = 1536 // 256
    reg = [31.0 * (128 + w) / 256 for w, c in jobs if c == "r" for _ in range(n_tiles)]
    broad = [34.0 for w, c in jobs if c == "b" for _ in range(n_tiles)]
    light = [19.5 for w, c in jobs if c == "l" for _ in range(n_tiles)]
    print(f"items regular {len(reg)} broad {len(broad)} light {len(light)}: "
          f"regular, broad, light {makespan(reg + broad + light):.0f}; "
          f"light first {makespan(light + reg + broad):.0f}; "
          f"light second {makespan(reg + light + broad):.0f}; "
          f"longest first {makespan(sorted(reg + broad + light, reverse=True)):.0f}; "
          f"bound {sum(reg + broad + light) / 132:.0f}")
