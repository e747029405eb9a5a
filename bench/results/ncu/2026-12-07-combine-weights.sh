#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, session 4): the layer's
# GPU tests of the carried binaries (f8e5b5f: the combine loads its router
# weights with their rows); the same-binary A/B of F32 slot rows
# (NVFP4MOE_LAYER_F32_SLOTS=1, base) against BF16 slot rows (new) at decode
# sizes, where 8c7c93b's run lost 2% at qwen3 T = 1, and at T = 2048; then a
# status run of the layer and both GEMMs at T = 2048 with the torch peers
# (target 6), tests and sanitizers left to steps 1 and the earlier call.
#   bench/results/ncu/2026-12-07-combine-weights.sh BUILD OUTDIR COMMIT
set -u
b=$1; out=$2; commit=$3
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
cat "$out/gpu.txt"
timeout 150 "$b/tests/nvfp4moe_gpu_tests" \
  --gtest_filter='GpuMoeLayer.*:GpuMulMatId.SchedulesBitIdenticalAndDeterministic:GpuMulMatId.RepeatedLaunchesGiveTheSameBits' \
  > "$out/gpu-tests-layer.log" 2>&1
echo "layer gpu tests rc=$?" | tee -a "$out/gpu-tests-layer.log"
grep -E "^\[  (PASSED|FAILED)|tests ran|FAILED" "$out/gpu-tests-layer.log" | head -20
AB_REPS=2 timeout 150 "$here/2026-12-06-env-ab.sh" "$b" "$out/ab" NVFP4MOE_LAYER_F32_SLOTS "1 0" \
  "--preset qwen3-30b-a3b,deepseek-v3 --op layer --tokens 1,2,4,8 --routing uniform;--preset qwen3-30b-a3b,gpt-oss-20b --op layer --tokens 2048 --routing uniform"
NVFP4MOE_COMMIT=$commit NVFP4MOE_PREBUILT=$b NVFP4MOE_SKIP_SANITIZER=1 NVFP4MOE_SKIP_TESTS=1 \
  NVFP4MOE_BENCH_TIMEOUT=120 NVFP4MOE_PEER_TIMEOUT=150 timeout 290 scripts/gpu-check.sh "$out/st" \
  --preset qwen3-30b-a3b,deepseek-v3,gpt-oss-20b,mixtral-8x7b --routing uniform,zipf:1.2 --tokens 2048 | tail -40
