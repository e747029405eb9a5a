#!/usr/bin/env python3
"""The class durations of 2026-12-07-light-grid.sh (cd/durations.csv) and its sampled clocks -> a results JSON.

  light_grid2json.py OUTDIR OUT_JSON COMMIT DATE COMMAND NOTE [PEAK_GBPS]

Per launch: duration, grid, DRAM and tensor-pipe % of peak, SM clock, and the figures of the ncu sections the driver
asked for (cd/metrics.json: issue slots, eligible warps, stall reasons); the light launches also get their DRAM rate
derived from the percentage and PEAK_GBPS (the GPU's nominal DRAM peak, ncu's reference: 3352 on an H100 SXM,
4800 on an H200), in total and per CTA. clocks.csv (nvidia-smi samples during the serial-launch A/B) gives the SM
clock and power in the bench.
"""
import csv
import json
import re
import statistics
import sys

out, dst, commit, date, command, note = sys.argv[1:7]
peak = float(sys.argv[7]) if len(sys.argv) > 7 else None
gpu = open(f"{out}/gpu.txt").read().strip().splitlines()[-1]
def num(x):
    return float(str(x).replace(",", ""))


def clock_mhz(x):
    """ncu scales the unit of sm__cycles_elapsed.avg.per_second (cycle/ns, cycle/us or cycle/s)."""
    v = num(x)
    return v * 1000 if v < 10 else v if v < 1e4 else v / 1e6


# The ncu sections' figures per launch (class-durations.sh's metrics.json, CD_SECTIONS), keyed as durations.csv.
section_metrics = {}
try:
    base = {"gpu__time_duration.sum", "launch__grid_size", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "sm__cycles_elapsed.avg.per_second"}
    for m in json.load(open(f"{out}/cd/metrics.json")):
        figures = {}
        for name, value in m["metrics"].items():
            if name in base:
                continue
            try:
                figures[name] = num(value)
            except ValueError:
                figures[name] = value
        section_metrics[(m["case"], m["launch"])] = figures
except FileNotFoundError:
    pass

records = []
for r in csv.DictReader(open(f"{out}/cd/durations.csv")):
    m = re.search(r"NVFP4MOE_LIGHT_GRID=(\d+)", r["case"])
    light = "<32," in r["kernel"]
    rec = {"case": r["case"], "launch": int(r["launch"]), "kernel": r["kernel"],
           "class": "light (narrow, 32 rows)" if light else "regular (wide, 128 rows)",
           "light_grid_cap": int(m[1]) if m else None, "duration_us": num(r["duration_ns"]) / 1000,
           "grid": int(num(r["grid"])), "dram_pct_of_peak": num(r["dram_pct"]),
           "tensor_pct_of_peak": num(r["tensor_pct"])}
    if r.get("sm_clock"):
        rec["sm_clock_mhz"] = round(clock_mhz(r["sm_clock"]), 1)
    if section_metrics.get((r["case"], r["launch"])):
        rec["ncu_sections"] = section_metrics[(r["case"], r["launch"])]
    if light and peak:
        gbps = rec["dram_pct_of_peak"] / 100 * peak
        rec["derived_dram_gbps"] = round(gbps, 1)
        rec["derived_dram_gbps_per_cta"] = round(gbps / rec["grid"], 2)
        rec["derived_bytes_gb"] = round(gbps * rec["duration_us"] * 1e-6, 3)
    records.append(rec)
clocks = []
try:
    for line in open(f"{out}/clocks.csv"):
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 2 and f[0].endswith("MHz"):
            clocks.append((float(f[0].split()[0]), float(f[1].split()[0])))
except FileNotFoundError:
    pass
doc = {"kind": "per-launch durations under Nsight Compute (launches serialized), light launch on capped grids",
       "commit": commit, "gpu": gpu, "date": date, "command": command, "note": note,
       "dram_peak_gbps_assumed": peak, "records": records}
if clocks:
    sm = [c for c, _ in clocks]
    pw = [p for _, p in clocks]
    doc["bench_clocks"] = {"samples": len(clocks), "sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm),
                           "sm_mhz_max": max(sm), "power_w_median": statistics.median(pw), "power_w_max": max(pw)}
json.dump(doc, open(dst, "w"), indent=1)
print(json.dumps(doc, indent=1)[:4000])
