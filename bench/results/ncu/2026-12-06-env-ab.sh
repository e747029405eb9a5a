#!/usr/bin/env bash
# Experiment only (not part of the library): the same bench cases from one
# build under two values of an experiments variable, alternating, so that
# the comparison shares a binary, a GPU and its clocks. Writes OUTDIR/ab.txt
# in 2026-11-30-ab.sh's format, the first value tagged "base" and the second
# "new", for ab2json.py.
#   [AB_REPS=2] bench/results/ncu/2026-12-06-env-ab.sh BUILD OUTDIR VAR "V_BASE V_NEW" "bench args;bench args..."
# BUILD: a build directory holding nvfp4moe (scripts/gpu-check.sh's build-gpu).
set -u
build=$1; out=$2; var=$3; read -r v_base v_new <<< "$4"; cases=$5
mkdir -p "$out"
rows_awk=$(cd "$(dirname "$0")" && pwd)/bench_rows.awk
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq "${AB_REPS:-2}"); do
  # Even repetitions run the values in reverse order (2026-11-30-ab.sh).
  order="base new"
  [ $((rep % 2)) = 0 ] && order="new base"
  for tag in $order; do
    value=$v_base
    [ "$tag" = new ] && value=$v_new
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      env "$var=$value" timeout 120 "$build/nvfp4moe" bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$tag" -v sfx="" -f "$rows_awk" | tee -a "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> "$out/ab.txt"
