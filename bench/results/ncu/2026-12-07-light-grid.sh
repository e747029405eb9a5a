#!/usr/bin/env bash
# Experiment driver for one device call (2026-12-07, session 2), in order of
# need (the call's limit may cut the end; each step writes as it goes):
# the light-experts and same-bits GPU tests of the carried binaries; Next
# item 11's measurement, the light launch's duration and DRAM rate on L CTAs
# (NVFP4MOE_LIGHT_GRID) under Nsight Compute, deepseek T = 2048 Zipf, with
# its issue slots and stall reasons (is a capped CTA issue- or latency-bound?),
# and one capped launch's stall samples by SASS line; the
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
# Where a capped narrow CTA's issue slots go: one light launch on 33 CTAs
# (calls launch the regular class, then the light one: skip 3 is the second
# call's light launch), every section, stall samples by SASS line.
NVFP4MOE_LIGHT_GRID=33 timeout 150 ncu --clock-control none -k regex:grouped_gemm --launch-skip 3 --launch-count 1 \
  --set full --import-source no -o /tmp/light33 -f "$b/nvfp4moe" bench --device cuda --schedule compact --reps 2 \
  --preset deepseek-v3 --tokens 2048 --op gate_up --routing zipf:1.2 > "$out/light33-run.log" 2>&1
ncu --import /tmp/light33.ncu-rep --page details > "$out/light33-details.txt" 2>&1
grep -E "nvfp4_grouped_gemm|Duration|DRAM Throughput|Issued Warp|No Eligible|Eligible Warps|Active Warps" "$out/light33-details.txt" | head -12
ncu --import /tmp/light33.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > "$out/light33-source.csv.gz"
ncu --import /tmp/light33.ncu-rep --page raw --csv 2>/dev/null | gzip > "$out/light33-raw.csv.gz"
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
