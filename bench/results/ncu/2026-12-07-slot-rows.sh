#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, session 3), in order of
# need (each step writes as it goes): the layer's GPU tests and the same-bits
# tests of the carried binaries (BF16 slot rows, 3c871ac); a same-binary A/B
# of the layer with F32 slot rows and the router weight in the down's
# writeback (NVFP4MOE_LAYER_F32_SLOTS=1, base) against BF16 slot rows
# weighted in the combine (new) at T = 2048 and at decode sizes; then, on an
# H100 and with time left, Next item 11's light-grid measurement.
#   bench/results/ncu/2026-12-07-slot-rows.sh BUILD OUTDIR
set -u
b=$1; out=$2
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
cat "$out/gpu.txt"
timeout 150 "$b/tests/nvfp4moe_gpu_tests" \
  --gtest_filter='GpuMoeLayer.*:*LightExperts*:GpuMulMatId.SchedulesBitIdenticalAndDeterministic:GpuMulMatId.RepeatedLaunchesGiveTheSameBits' \
  > "$out/gpu-tests-layer.log" 2>&1
echo "layer gpu tests rc=$?" | tee -a "$out/gpu-tests-layer.log"
grep -E "^\[  (PASSED|FAILED)|tests ran|slot rows|FAILED" "$out/gpu-tests-layer.log" | head -20
AB_REPS=2 timeout 240 "$here/2026-12-06-env-ab.sh" "$b" "$out/ab-slots" NVFP4MOE_LAYER_F32_SLOTS "1 0" \
  "--preset qwen3-30b-a3b,deepseek-v3,gpt-oss-20b,mixtral-8x7b --op layer --tokens 2048 --routing uniform,zipf:1.2;--preset qwen3-30b-a3b,deepseek-v3 --op layer --tokens 1,8,128 --routing uniform"
if ! grep -q H200 "$out/gpu.txt"; then
  "$here/2026-12-07-light-grid.sh" "$b" "$out/lg" "33 132 66"
fi
