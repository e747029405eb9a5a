#!/usr/bin/env bash
# Experiment only: the same bench cases from two prebuilt binaries in one
# call, alternating (odd repetitions base first, even ones new first), in
# 2026-11-30-ab.sh's ab.txt format for ab2json.py. For changes whose A/B
# needs no device build: both binaries are built here and carried.
#   [AB_REPS=3] bench/results/ncu/2026-12-07-two-binaries-ab.sh BASE_BIN NEW_BIN OUTDIR "bench args;bench args..."
set -u
base=$1; new=$2; out=$3; cases=$4
mkdir -p "$out"
rows_awk=$(cd "$(dirname "$0")" && pwd)/bench_rows.awk
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq "${AB_REPS:-3}"); do
  order="base new"
  [ $((rep % 2)) = 0 ] && order="new base"
  for tag in $order; do
    bin=$base
    [ "$tag" = new ] && bin=$new
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      timeout 120 "$bin" bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$tag" -v sfx="" -f "$rows_awk" | tee -a "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> "$out/ab.txt"
