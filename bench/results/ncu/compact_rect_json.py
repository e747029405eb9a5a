#!/usr/bin/env python3
"""ab.txt of a same-build sweep whose cases ran --schedule compact,rect -> a results JSON of compact against rect.

  compact_rect_json.py AB_TXT OUT_JSON COMMIT DATE COMMAND NOTE

Every line of AB_TXT is one sample (the sweep's tags are repetitions of the same build). Per case: the samples of
each schedule, rect/compact by the minima and by the medians, and each schedule's spread (max/min - 1).
"""
import collections
import json
import statistics
import sys

from ab2json import geomean, read_ab


def main():
    src, out, commit, date, command, note = sys.argv[1:7]
    samples = collections.defaultdict(lambda: collections.defaultdict(list))
    recs, gpu = read_ab(src)
    for r in recs:
        samples[(r["preset"], r["op"], r["tokens"], r["routing"])][r["schedule"]].append(r["us"])
    cases = []
    for (preset, op, tokens, routing), s in sorted(samples.items()):
        c, r = s.get("compact"), s.get("rect")
        if not c or not r:
            continue
        cases.append({"preset": preset, "op": op, "tokens": tokens, "routing": routing, "compact_us": c, "rect_us": r,
                      "rect_over_compact_min": min(r) / min(c),
                      "rect_over_compact_median": statistics.median(r) / statistics.median(c),
                      "compact_spread": max(c) / min(c) - 1, "rect_spread": max(r) / min(r) - 1})
    ratios = [x["rect_over_compact_min"] for x in cases]
    doc = {"kind": "compact against rect, one build, schedules alternating in one call", "commit": commit,
           "gpu": gpu, "date": date, "command": command, "note": note,
           "geomean_rect_over_compact_min": geomean(ratios),
           "below_1_by_min": sum(x < 1.0 for x in ratios), "cases": cases}
    json.dump(doc, open(out, "w"), indent=1)
    print(out, len(cases), "cases, geomean", doc["geomean_rect_over_compact_min"], "below 1:", doc["below_1_by_min"])


if __name__ == "__main__":
    main()
