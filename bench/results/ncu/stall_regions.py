#!/usr/bin/env python3
"""Stall samples of the wide BF16 rows GEMM kernel by code region, from two
`ncu --page source --csv --print-source sass` exports (gzip), for example the
base and no-store builds of 2026-12-01-store-traffic-ncu.sh:

  stall_regions.py source-base.csv.gz source-nostore.csv.gz

Regions follow the kernel's SASS in address order: the consumers' K loops
(from a full-barrier wait to the final wgmma wait), the epilogue up to its
second named barrier (alpha, row table, stmatrix), the store loop and the
next tile's set-up, then the producer (from its register release) and the
out-of-line barrier-wait slow paths. Prints each region's samples in both
exports and the three stall reasons that grew most."""
import collections
import csv
import gzip
import sys

ALL = "Warp Stall Sampling (All Samples)"
REGIONS = ["prologue", "k loop", "epilogue to 2nd barrier", "store loop + next tile", "producer", "slow paths"]


def regions(path):
    rows = list(csv.reader(gzip.open(path, "rt")))
    header = rows[1]
    reasons = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    sums = collections.defaultdict(collections.Counter)
    region, barriers = "prologue", 0
    for r in rows[2:]:
        if len(r) != len(header):
            continue
        d = dict(zip(header, r))
        s = d["Source"]
        if "USETMAXREG.DEALLOC" in s:
            region = "producer"
        elif region == "producer" and "EXIT" in s and "@P" not in s:
            region = "slow paths"
        elif region not in ("producer", "slow paths"):
            if "SYNCS.PHASECHK" in s and region in ("prologue", "store loop + next tile"):
                region = "k loop"
            elif "DEPBAR.LE gsb0, 0x0" in s and region == "k loop":
                region, barriers = "epilogue to 2nd barrier", 0
            elif "BAR.SYNC.DEFER_BLOCKING 0x1" in s and region == "epilogue to 2nd barrier":
                barriers += 1
                if barriers == 2:
                    region = "store loop + next tile"
        for k in reasons:
            sums[region][k] += int(d[k])
        sums[region]["all"] += int(d[ALL])
    return sums


def main():
    a, b = regions(sys.argv[1]), regions(sys.argv[2])
    print(f"{'region':26}{'first':>8}{'second':>8}{'diff':>7}  reasons that grew most")
    for g in REGIONS:
        x, y = a[g], b[g]
        grew = sorted(((x[k] - y[k], k) for k in x if k != "all"), reverse=True)[:3]
        print(f"{g:26}{x['all']:8}{y['all']:8}{x['all'] - y['all']:7}  " +
              ", ".join(f"{k[6:]} {v:+d}" for v, k in grew))
    print(f"{'total':26}{sum(v['all'] for v in a.values()):8}{sum(v['all'] for v in b.values()):8}")


if __name__ == "__main__":
    main()
