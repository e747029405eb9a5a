#!/usr/bin/env python3
"""Reads `ncu --page source --csv --print-source sass` from stdin and prints the
N instructions with the most warp-stall samples, with their share of the total,
so that a profile that comes back as text says where the kernel waits."""
import csv
import sys


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rows = list(csv.reader(sys.stdin))
    header_at = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
    if header_at is None:
        sys.exit("ncu_hot_lines.py: no 'Warp Stall Sampling' column in the input")
    header = rows[header_at]
    samples = next(i for i, c in enumerate(header) if "Warp Stall Sampling (All" in c)
    source = next((i for i, c in enumerate(header) if c.strip() == "Source"), 1)
    body = [r for r in rows[header_at + 1:] if len(r) == len(header) and number(r[samples]) is not None]
    total = sum(number(r[samples]) for r in body) or 1.0
    print(f"{len(body)} SASS lines, {total:.0f} stall samples")
    for r in sorted(body, key=lambda r: -number(r[samples]))[:n]:
        print(f"{number(r[samples]) / total * 100:5.1f}%  {r[0]:>8}  {r[source].strip()}")


if __name__ == "__main__":
    main()
