#!/usr/bin/env python3
"""ab.txt of 2026-11-30-ab.sh -> a results JSON (commit, GPU, date, command, per-case minima and speedups).

  ab2json.py AB_TXT OUT_JSON BASE_COMMIT NEW_COMMIT DATE COMMAND NOTE [MID_COMMIT]

Speedups are min(base) / min(new) (and min(base) / min(mid), min(mid) / min(new) with a mid build) over the
alternating repetitions of one call. Lines that end in "us graph G" (the bench's "µs in a graph of 8" column, as
the decode A/B loops print it) also give us_in_graph and speedup_in_graph.
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
        m = re.match(r"(\w+)\s+(\S+)\s+(\S+)\s+T=\s*(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+us(?:\s+graph\s+([\d.]+))?",
                     line)
        if m:
            rec = {"build": m[1], "preset": m[2], "op": m[3], "tokens": int(m[4]), "routing": m[5],
                   "schedule": m[6], "us": float(m[7])}
            # ab.sh finds the column by its header. The bound is for ab.txt
            # files from before it did (the eleventh column at every T, past
            # the bench's in-graph T the cuBLAS peer); the bench times no call
            # in a graph beyond T = 32.
            if m[8] and rec["tokens"] <= 32:
                rec["us_in_graph"] = float(m[8])
            recs.append(rec)
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
    graph = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in recs:
        key = (r["preset"], r["op"], r["tokens"], r["routing"], r["schedule"])
        cases[key][r["build"]].append(r["us"])
        if "us_in_graph" in r:
            graph[key][r["build"]].append(r["us_in_graph"])
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
        g = graph.get(k)
        if g and g.get("base") and g.get("new"):
            row["base_us_in_graph_min"], row["new_us_in_graph_min"] = min(g["base"]), min(g["new"])
            row["speedup_in_graph"] = min(g["base"]) / min(g["new"])
        summary.append(row)
    doc = {"kind": "same-call A/B of builds", "commit": new, "base_commit": base, "gpu": gpu, "date": date,
           "command": command, "note": note, "geomean_speedup": geomean([s["speedup"] for s in summary]),
           "summary": summary, "records": recs}
    in_graph = [s["speedup_in_graph"] for s in summary if "speedup_in_graph" in s]
    if in_graph:
        doc["geomean_speedup_in_graph"] = geomean(in_graph)
    if mid:
        doc["mid_commit"] = mid
        doc["geomean_speedup_mid_over_base"] = geomean([s["speedup_mid_over_base"] for s in summary if "mid_us_min" in s])
    json.dump(doc, open(out, "w"), indent=1)
    print(out, len(recs), "records, geomean", doc["geomean_speedup"])


if __name__ == "__main__":
    main()
