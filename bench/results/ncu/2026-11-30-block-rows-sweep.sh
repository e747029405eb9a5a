#!/usr/bin/env bash
# Experiment only (not part of the library): the same bench cases with the
# token tile forced narrow (NVFP4MOE_BLOCK_ROWS=32, tag "base") and wide
# (NVFP4MOE_BLOCK_ROWS=128, tag "new"), alternating in one call on one build,
# to place choose_block_rows' threshold. SWEEP_MID=64 adds the medium tile as
# tag "mid". ab2json.py turns OUTDIR/ab.txt into a results file (speedup =
# narrow time / wide time).
# SWEEP_VAR=NAME SWEEP_BASE=a SWEEP_NEW=b [SWEEP_MID=c] sweeps another
# experiment variable the same way (tags base, mid, new).
#   [AB_REPS=2] [SWEEP_MID=64] bench/results/ncu/2026-11-30-block-rows-sweep.sh BUILD_DIR OUTDIR "bench args;..."
set -u
bin=$1/nvfp4moe; out=$2; cases=$3; mkdir -p "$out"
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq "${AB_REPS:-2}"); do
  for tag in base ${SWEEP_MID:+mid} new; do
    case $tag in base) value=${SWEEP_BASE:-32} ;; mid) value=$SWEEP_MID ;; new) value=${SWEEP_NEW:-128} ;; esac
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      env "${SWEEP_VAR:-NVFP4MOE_BLOCK_ROWS}=$value" timeout 300 "$bin" bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" |
        grep -v "^| preset" |
        awk -F'|' -v tag="$tag" '{printf "%-4s %s %s T=%s %s %s %s us graph %s\n", tag, $2, $3, $4, $5, $6, $7, $11}' | tee -a "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> "$out/ab.txt"
