#!/usr/bin/env python3
"""ab.txt of 2026-11-30-ab.sh -> a results JSON (commit, GPU, date, command, per-case minima and speedups).

  ab2json.py AB_TXT OUT_JSON BASE_COMMIT NEW_COMMIT DATE COMMAND NOTE [MID_COMMIT]

Speedups are min(base) / min(new) (and min(base) / min(mid), min(mid) / min(new) with a mid build) over the
alternating repetitions of one call.
"""
import collections
import json
import math
import re
import sys


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def read_ab(src):
    """The records of an ab.txt (tag, preset, op, tokens, routing, schedule, us) and the GPU line."""
    recs, gpu = [], None
    for line in open(src):
        m = re.match(r"(\w+)\s+(\S+)\s+(\S+)\s+T=\s*(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+us", line)
        if m:
            recs.append({"build": m[1], "preset": m[2], "op": m[3], "tokens": int(m[4]), "routing": m[5],
                         "schedule": m[6], "us": float(m[7])})
        elif line.startswith("NVIDIA"):
            gpu = line.strip()
    return recs, gpu


def main():
    src, out, base, new, date, command, note = sys.argv[1:8]
    mid = sys.argv[8] if len(sys.argv) > 8 else None
    commits = {"base": base, "mid": mid, "new": new}
    recs, gpu = read_ab(src)
    for r in recs:
        r["commit"] = commits[r["build"]]
    cases = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in recs:
        cases[(r["preset"], r["op"], r["tokens"], r["routing"], r["schedule"])][r["build"]].append(r["us"])
    summary = []
    for k, v in cases.items():
        if not v.get("base") or not v.get("new"):
            continue
        row = {"preset": k[0], "op": k[1], "tokens": k[2], "routing": k[3], "schedule": k[4],
               "base_us_min": min(v["base"]), "new_us_min": min(v["new"]), "speedup": min(v["base"]) / min(v["new"])}
        if v.get("mid"):
            row["mid_us_min"] = min(v["mid"])
            row["speedup_mid_over_base"] = min(v["base"]) / min(v["mid"])
            row["speedup_new_over_mid"] = min(v["mid"]) / min(v["new"])
        summary.append(row)
    doc = {"kind": "same-call A/B of builds", "commit": new, "base_commit": base, "gpu": gpu, "date": date,
           "command": command, "note": note, "geomean_speedup": geomean([s["speedup"] for s in summary]),
           "summary": summary, "records": recs}
    if mid:
        doc["mid_commit"] = mid
        doc["geomean_speedup_mid_over_base"] = geomean([s["speedup_mid_over_base"] for s in summary if "mid_us_min" in s])
    json.dump(doc, open(out, "w"), indent=1)
    print(out, len(recs), "records, geomean", doc["geomean_speedup"])


if __name__ == "__main__":
    main()
