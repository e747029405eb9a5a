#!/usr/bin/env python3
"""Experiment only: 2026-12-03-variants.sh's ab.txt as a results file.

  variants2json.py AB_TXT OUT BASE_TAG COMMIT DATE COMMAND NOTE

Every record, and per case the minimum over repetitions of each tree's time
in a graph of 8 (the column the streamer's decisions are judged by) with its
speedup over BASE_TAG's, or of its single-call time where the bench times no
graph (larger T); geomean per tree of each kind.
"""
import collections
import json
import math
import re
import sys

LINE = re.compile(r"(\S+)\s+(\S+)\s+(\S+)\s+T=\s*(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+us(?:\s+graph\s+([\d.]+))?")


def main():
    ab_txt, out, base, commit, date, command, note = sys.argv[1:8]
    records, gpu, tags = [], "", []
    for line in open(ab_txt):
        m = LINE.match(line)
        if m:
            tag, preset, op, tokens, routing, schedule, us, graph = m.groups()
            if tag not in tags:
                tags.append(tag)
            record = dict(build=tag, preset=preset, op=op, tokens=int(tokens), routing=routing, schedule=schedule,
                          us=float(us))
            if graph:
                record["us_in_graph"] = float(graph)
            records.append(record)
        elif line.startswith("NVIDIA"):
            gpu = line.strip()
    cases = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        cases[(r["preset"], r["op"], r["tokens"], r["routing"], r["schedule"])][r["build"]].append(r)
    summary = []
    logs = {"in_graph": collections.defaultdict(list), "single_call": collections.defaultdict(list)}
    for key in sorted(cases):
        by_tag = cases[key]
        if base not in by_tag:
            continue
        in_graph = all("us_in_graph" in r for rs in by_tag.values() for r in rs)
        column, kind = ("us_in_graph", "in_graph") if in_graph else ("us", "single_call")
        row = dict(zip(("preset", "op", "tokens", "routing", "schedule"), key))
        best = {tag: min(r[column] for r in rs) for tag, rs in by_tag.items()}
        for tag in tags:
            if tag in best:
                row[f"{tag}_{column}_min"] = best[tag]
                if tag != base:
                    row[f"speedup_{kind}_{tag}"] = best[base] / best[tag]
                    logs[kind][tag].append(math.log(row[f"speedup_{kind}_{tag}"]))
        summary.append(row)
    geomean = {kind: {t: math.exp(sum(v) / len(v)) for t, v in by_tag.items()} for kind, by_tag in logs.items()}
    result = dict(kind=f"same-call comparison of {len(tags)} builds or settings", commit=commit, base=base, gpu=gpu,
                  date=date, command=command, note=note, geomean_speedup_in_graph=geomean["in_graph"],
                  geomean_speedup_single_call=geomean["single_call"], summary=summary, records=records)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
