#!/usr/bin/env bash
# Experiment only (not part of the library): each grouped GEMM launch of a
# case on its own, under Nsight Compute, which serializes launches: the
# regular (wide) and light (narrow) experts' launches that the library
# overlaps (launch_grouped_gemm) get a duration each, with DRAM and tensor
# pipe activity, so a skewed routing's time can be split by expert class.
#   bench/results/ncu/2026-12-06-class-durations.sh BUILD OUTDIR "bench args;bench args..."
# A case's args may start with VAR=VALUE words (e.g. NVFP4MOE_EXPERT_CLASSES=0),
# set for that case only. Writes OUTDIR/durations.csv (case, kernel,
# duration ns, grid, DRAM % of peak, tensor pipe % of peak, SM clock) and
# OUTDIR/metrics.json (every metric ncu printed, per launch).
# CD_SECTIONS="WarpStateStats SchedulerStats" adds those ncu sections (why a
# launch runs at its rate: issue slots, eligible warps, stall reasons).
set -u
build=$1; out=$2; cases=$3
mkdir -p "$out"
metrics=gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
IFS=';' read -r -a list <<< "$cases"
for c in "${list[@]}"; do
  vars=(); args=()
  for word in $c; do
    if [ ${#args[@]} = 0 ] && [[ "$word" == *=* ]]; then vars+=("$word"); else args+=("$word"); fi
  done
  echo "######## ${c}" >> "$out/ncu.log"
  # Each call launches each class once: the first CD_LAUNCHES (6) launches
  # are the first warm-up calls' (3 calls of two classes, or 6 of one).
  sections=()
  for sec in ${CD_SECTIONS:-}; do sections+=(--section "$sec"); done
  env "${vars[@]}" timeout 240 ncu --clock-control none -k regex:grouped_gemm --launch-count "${CD_LAUNCHES:-6}" --metrics "$metrics" "${sections[@]}" --csv \
    "$build/nvfp4moe" bench --device cuda --schedule compact --reps 2 "${args[@]}" 2>> "$out/ncu.log" |
    grep -E '^"' | awk -v c="$c" 'BEGIN { FS = "\",\"" } { gsub(/^"|"$/, "", $0); print c "\t" $0 }' >> "$out/raw.tsv"
done
python3 - "$out" <<'PY'
import collections, csv, json, sys
out = sys.argv[1]
rows = [line.rstrip("\n").split("\t", 1) for line in open(f"{out}/raw.tsv")]
header = None
by = collections.OrderedDict()
for case, rest in rows:
    fields = rest.split('","')
    if fields[0] == "ID":
        header = fields
        continue
    r = dict(zip(header, fields))
    key = (case, r["ID"], r["Kernel Name"][:200])
    by.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"]
with open(f"{out}/durations.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["case", "launch", "kernel", "duration_ns", "grid", "dram_pct", "tensor_pct", "sm_clock"])
    for (case, lid, kernel), m in by.items():
        w.writerow([case, lid, kernel, m.get("gpu__time_duration.sum"), m.get("launch__grid_size"),
                    m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                    m.get("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
                    m.get("sm__cycles_elapsed.avg.per_second")])
json.dump([{"case": case, "launch": lid, "kernel": kernel, "metrics": m} for (case, lid, kernel), m in by.items()],
          open(f"{out}/metrics.json", "w"), indent=1)
print(open(f"{out}/durations.csv").read()[-6000:])
PY
