#!/usr/bin/env python3
"""Tables from `ncu --page source --csv --print-source sass` (SourceCounters section):
shared-memory wavefronts by opcode (actual, ideal, excessive), and, for the SASS region around the first and
last HGMMA whose text contains PATTERN, warp-stall samples by opcode and reason.

  ncu_source_tables.py SOURCE_CSV [PATTERN]
"""
import csv
import sys

REASONS = ["stall_wait", "stall_dispatch", "stall_math", "stall_short_sb", "stall_selected", "stall_not_selected",
           "stall_long_sb"]


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    t = source.strip().split()
    return (t[1] if t[0].startswith("@") else t[0]).split(".")[0]


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    pattern = sys.argv[2] if len(sys.argv) > 2 else "HGMMA.64x128x16"
    at = next(i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r))
    header = rows[at]
    col = {c: i for i, c in enumerate(header)}
    body = [r for r in rows[at + 1:] if len(r) == len(header)]
    wf, ideal, excess = col["L1 Wavefronts Shared"], col["L1 Wavefronts Shared Ideal"], col["L1 Wavefronts Shared Excessive"]
    by_op = {}
    for r in body:
        a = by_op.setdefault(opcode(r[col["Source"]]), [0.0, 0.0, 0.0, 0.0])
        a[0] += number(r[wf]); a[1] += number(r[ideal]); a[2] += number(r[excess])
        a[3] += number(r[col["Instructions Executed"]])
    total = sum(a[0] for a in by_op.values()) or 1.0
    print(f"shared-memory wavefronts: {total:.0f}")
    print(f"{'opcode':10s} {'wavefronts':>12s} {'share':>6s} {'ideal':>12s} {'excessive':>12s} {'per instr':>9s}")
    for op, a in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        if a[0] > 0:
            print(f"{op:10s} {a[0]:12.0f} {a[0] / total * 100:5.1f}% {a[1]:12.0f} {a[2]:12.0f} {a[0] / max(a[3], 1):9.1f}")
    samples = col["Warp Stall Sampling (All Samples)"]
    all_samples = sum(number(r[samples]) for r in body) or 1.0
    hits = [i for i, r in enumerate(body) if pattern in r[col["Source"]]]
    if not hits:
        return
    region = body[max(hits[0] - 200, 0):hits[-1] + 40]
    region_samples = sum(number(r[samples]) for r in region) or 1.0
    print(f"\nK-loop region (200 SASS lines before the first '{pattern}' to 40 after the last): "
          f"{region_samples / all_samples * 100:.1f}% of the kernel's stall samples")
    ops = {}
    for r in region:
        d = ops.setdefault(opcode(r[col["Source"]]), {"n": 0, "s": 0.0})
        d["n"] += 1
        d["s"] += number(r[samples])
        for c in REASONS:
            d[c] = d.get(c, 0.0) + number(r[col[c]])
    print(f"{'opcode':10s} {'lines':>5s} {'samples':>7s}  " + " ".join(f"{c[6:]:>12s}" for c in REASONS))
    for op, d in sorted(ops.items(), key=lambda kv: -kv[1]["s"])[:14]:
        print(f"{op:10s} {d['n']:5d} {d['s'] / region_samples * 100:6.1f}%  " +
              " ".join(f"{d[c] / region_samples * 100:11.1f}%" for c in REASONS))


if __name__ == "__main__":
    main()
