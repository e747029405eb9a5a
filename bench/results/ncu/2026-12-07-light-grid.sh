#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, session 2), in order of
# need (the call's limit may cut the end; each step writes as it goes):
# the light-experts and same-bits GPU tests of the carried binaries; Next
# item 11's measurement, the light launch's duration and DRAM rate on L CTAs
# (NVFP4MOE_LIGHT_GRID) under Nsight Compute, deepseek T = 2048 Zipf, with
# its issue slots and stall reasons (is a capped CTA issue- or latency-bound?); the
# overlapped launches against serial ones in the bench
# (NVFP4MOE_SERIAL_LAUNCHES) with the SM clock and power sampled (in the
# bab1514 call the bench timed the Zipf case 8-11% above the sum of its two
# launches' ncu durations); then the whole GPU suite and memcheck of the
# light-experts tests.
#   bench/results/ncu/2026-12-07-light-grid.sh BUILD OUTDIR "L values"
set -u
b=$1; out=$2; ls=${3:-"33 66 132"}
here=$(dirname "$0")
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
cat "$out/gpu.txt"
timeout 120 "$b/tests/nvfp4moe_gpu_tests" --gtest_filter='*LightExperts*:GpuMulMatId.SchedulesBitIdenticalAndDeterministic:GpuMulMatId.RepeatedLaunchesGiveTheSameBits:CudaHostPolicy.*' \
  > "$out/gpu-tests-light.log" 2>&1
echo "light gpu tests rc=$?" | tee -a "$out/gpu-tests-light.log"
grep -E "^\[  (PASSED|FAILED)|tests ran|LightExperts.*(OK|FAILED)" "$out/gpu-tests-light.log"
cases=""
for l in $ls; do
  cases="$cases${cases:+;}NVFP4MOE_LIGHT_GRID=$l --preset deepseek-v3 --tokens 2048 --op gate_up --routing zipf:1.2"
done
CD_LAUNCHES=6 CD_SECTIONS="WarpStateStats SchedulerStats" timeout 200 "$here/2026-12-06-class-durations.sh" "$b" "$out/cd" "$cases" | cut -c1-220
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 250 > "$out/clocks.csv" 2>&1 &
smi=$!
AB_REPS=2 timeout 150 "$here/2026-12-06-env-ab.sh" "$b" "$out/ab-serial" NVFP4MOE_SERIAL_LAUNCHES "0 1" \
  "--preset deepseek-v3 --tokens 2048 --op gate_up,down --routing zipf:1.2,uniform"
kill $smi
timeout 280 "$b/tests/nvfp4moe_gpu_tests" > "$out/gpu-tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$out/gpu-tests.log"
grep -E "^\[  (PASSED|FAILED)|tests ran" "$out/gpu-tests.log"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/nvfp4moe_gpu_tests" \
  --gtest_filter='GpuMulMatId.LightExperts*:GpuMoeLayer.LightExperts*' > "$out/memcheck-light.log" 2>&1
echo "memcheck rc=$?" | tee -a "$out/memcheck-light.log"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck-light.log"
