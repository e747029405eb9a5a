#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, sixth session): is the
# ~0.55 us that BF16 slot rows still lose at qwen3 T = 1-2 (after the
# combine's weight preload) in the BF16 rows themselves? One build of
# exp/f32store (EXP: main e5bfe9b + NVFP4MOE_EXP_F32STORE; the branch is gone,
# its change is 2026-12-07-f32store-experiment.patch), variants rotated:
#   f32       NVFP4MOE_LAYER_F32_SLOTS=1 (F32 rows, router weight in the down)
#   bf16      the default (BF16 rows, router weight in the combine)
#   f32store  NVFP4MOE_EXP_F32STORE=1: the down stores the same BF16-rounded
#             values as F32 rows and the combine reads F32 (same bits as bf16)
#   main      MAIN's binary, no variable (must match bf16)
# after EXP's layer GPU tests with the switch on.
#   bench/results/ncu/2026-12-07-f32store.sh EXP MAIN OUTDIR
set -u
b=$1; main=$2; out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
NVFP4MOE_EXP_F32STORE=1 timeout 120 "$b/tests/nvfp4moe_gpu_tests" --gtest_filter='GpuMoeLayer.*' \
  > "$out/gpu-tests-layer-f32store.log" 2>&1
echo "layer gpu tests (NVFP4MOE_EXP_F32STORE=1) rc=$?"
grep -E "^\[  (PASSED|FAILED)|tests ran" "$out/gpu-tests-layer-f32store.log" | head
cases="--preset qwen3-30b-a3b --op layer --tokens 1,2,4,8 --routing uniform;--preset gpt-oss-20b,deepseek-v3 --op layer --tokens 1,2 --routing uniform"
IFS=';' read -r -a list <<< "$cases"
variants=(f32 bf16 f32store)
[ -x "$main/nvfp4moe" ] && variants+=(main)
nv=${#variants[@]}
for rep in $(seq "${AB_REPS:-3}"); do
  for i in $(seq 0 $((nv - 1))); do
    tag=${variants[$(( (i + rep) % nv ))]}
    case $tag in
      f32) envs="NVFP4MOE_LAYER_F32_SLOTS=1" ;; f32store) envs="NVFP4MOE_EXP_F32STORE=1" ;;
      *) envs="NVFP4MOE_EXP_F32STORE=0" ;;
    esac
    for c in "${list[@]}"; do
      bin=$b/nvfp4moe
      [ "$tag" = main ] && bin=$main/nvfp4moe
      # shellcheck disable=SC2086
      env $envs timeout 120 "$bin" bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$tag" -v sfx="" -f "$here/bench_rows.awk" >> "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> "$out/ab.txt"
tail -n 6 "$out/ab.txt"
