#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, fifth session): where
# the BF16 slot rows lose ~3% at qwen3 T = 1-2. One build of
# exp/combine-preload, four variants of the fused layer, rotated:
#   f32   NVFP4MOE_LAYER_F32_SLOTS=1 (F32 rows, router weight in the down)
#   bf16  the default (BF16 rows, each weight loaded beside its addition)
#   noweights  NVFP4MOE_EXP_COMBINE=1: the combine ignores the router
#         weights (wrong output; bounds what loading them costs)
#   pre   NVFP4MOE_EXP_COMBINE=2: the first batch of weights loaded before
#         the grid-dependency wait
#   f32store  NVFP4MOE_EXP_COMBINE=3: as pre, but the down stores its
#         BF16-rounded slot rows as F32 (the same values, twice the bytes)
#   clean CLEAN's build (CLEAN/nvfp4moe, no variable): the preload as it
#         would land, without the switch
# after the layer GPU tests with the preload on, and CLEAN's GPU tests.
#   bench/results/ncu/2026-12-07-combine-preload.sh BUILD OUTDIR [CLEAN]
set -u
b=$1; out=$2; clean=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for mode in 2 3; do
  NVFP4MOE_EXP_COMBINE=$mode timeout 120 "$b/tests/nvfp4moe_gpu_tests" --gtest_filter='GpuMoeLayer.*' \
    > "$out/gpu-tests-layer-mode$mode.log" 2>&1
  echo "layer gpu tests (NVFP4MOE_EXP_COMBINE=$mode) rc=$?"
  grep -E "^\[  (PASSED|FAILED)|tests ran" "$out/gpu-tests-layer-mode$mode.log" | head
done
if [ -n "$clean" ]; then
  timeout 150 "$clean/tests/nvfp4moe_gpu_tests" \
    --gtest_filter='GpuMoeLayer.*:*LightExperts*:GpuMulMatId.SchedulesBitIdenticalAndDeterministic:GpuMulMatId.RepeatedLaunchesGiveTheSameBits:*Decode*' \
    > "$out/gpu-tests-clean.log" 2>&1
  echo "clean gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|tests ran" "$out/gpu-tests-clean.log" | head
fi
cases="--preset qwen3-30b-a3b --op layer --tokens 1,2,4,2048 --routing uniform"
IFS=';' read -r -a list <<< "$cases"
variants=(f32 bf16 noweights pre f32store)
[ -n "$clean" ] && variants+=(clean)
nv=${#variants[@]}
for rep in $(seq "${AB_REPS:-3}"); do
  for i in $(seq 0 $((nv - 1))); do
    tag=${variants[$(( (i + rep) % nv ))]}
    case $tag in
      f32) envs="NVFP4MOE_LAYER_F32_SLOTS=1" ;; bf16) envs="NVFP4MOE_EXP_COMBINE=0" ;;
      noweights) envs="NVFP4MOE_EXP_COMBINE=1" ;; pre) envs="NVFP4MOE_EXP_COMBINE=2" ;;
      f32store) envs="NVFP4MOE_EXP_COMBINE=3" ;; clean) envs="NVFP4MOE_EXP_COMBINE=0" ;;
    esac
    for c in "${list[@]}"; do
      bin=$b/nvfp4moe
      [ "$tag" = clean ] && bin=$clean/nvfp4moe
      # shellcheck disable=SC2086
      env $envs timeout 120 "$bin" bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$tag" -v sfx="" -f "$here/bench_rows.awk" >> "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> "$out/ab.txt"
tail -n 6 "$out/ab.txt"
