#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07): the GPU tests of the
# carried binaries, then Next item 11's A/B of NVFP4MOE_LIGHT_SMS (0 = one
# light launch after the regular grid, L = the regular grid on num_sms - L
# SMs, the light launch beside it, a tail of L regular CTAs), then each
# launch's duration under Nsight Compute.
#   bench/results/ncu/2026-12-07-call1.sh BUILD OUTDIR "L values"
set -u
b=$1; out=$2; ls=${3:-33}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
timeout 200 "$b/tests/nvfp4moe_gpu_tests" > "$out/gpu-tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$out/gpu-tests.log"
grep -E "^\[  (PASSED|FAILED)|tests ran" "$out/gpu-tests.log"
here=$(dirname "$0")
cases="--preset deepseek-v3 --tokens 2048 --op gate_up,down --routing zipf:1.2,uniform;--preset qwen3-30b-a3b --tokens 2048 --op gate_up,down --routing zipf:1.2"
for l in $ls; do
  AB_REPS=2 timeout 200 "$here/2026-12-06-env-ab.sh" "$b" "$out/ab-$l" NVFP4MOE_LIGHT_SMS "0 $l" "$cases"
done
CD_LAUNCHES=6 timeout 150 "$here/2026-12-06-class-durations.sh" "$b" "$out/cd" \
  "--preset deepseek-v3 --tokens 2048 --op gate_up --routing zipf:1.2;--preset deepseek-v3 --tokens 2048 --op down --routing zipf:1.2"
