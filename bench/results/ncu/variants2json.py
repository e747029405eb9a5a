#!/usr/bin/env python3
"""Experiment only: 2026-12-03-variants.sh's ab.txt as a results file.

  variants2json.py AB_TXT OUT BASE_TAG COMMIT DATE COMMAND NOTE

Every record, and per case the minimum over repetitions of each tree's time
in a graph of 8 (the column the streamer's decisions are judged by) with its
speedup over BASE_TAG's; geomean per tree.
"""
import collections
import json
import math
import re
import sys

LINE = re.compile(r"(\S+)\s+(\S+)\s+(\S+)\s+T=\s*(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+us graph\s+([\d.]+)")


def main():
    ab_txt, out, base, commit, date, command, note = sys.argv[1:8]
    records, gpu, tags = [], "", []
    for line in open(ab_txt):
        m = LINE.match(line)
        if m:
            tag, preset, op, tokens, routing, schedule, us, graph = m.groups()
            if tag not in tags:
                tags.append(tag)
            records.append(dict(build=tag, preset=preset, op=op, tokens=int(tokens), routing=routing,
                                schedule=schedule, us=float(us), us_in_graph=float(graph)))
        elif line.startswith("NVIDIA"):
            gpu = line.strip()
    cases = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        cases[(r["preset"], r["op"], r["tokens"], r["routing"], r["schedule"])][r["build"]].append(r["us_in_graph"])
    summary, logs = [], collections.defaultdict(list)
    for key in sorted(cases):
        by_tag = cases[key]
        if base not in by_tag:
            continue
        row = dict(zip(("preset", "op", "tokens", "routing", "schedule"), key))
        base_min = min(by_tag[base])
        for tag in tags:
            if tag in by_tag:
                row[f"{tag}_us_in_graph_min"] = min(by_tag[tag])
                if tag != base:
                    row[f"speedup_in_graph_{tag}"] = base_min / min(by_tag[tag])
                    logs[tag].append(math.log(row[f"speedup_in_graph_{tag}"]))
        summary.append(row)
    result = dict(kind=f"same-call comparison of {len(tags)} builds or settings", commit=commit, base=base, gpu=gpu,
                  date=date, command=command, note=note,
                  geomean_speedup_in_graph={t: math.exp(sum(v) / len(v)) for t, v in logs.items()},
                  summary=summary, records=records)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
