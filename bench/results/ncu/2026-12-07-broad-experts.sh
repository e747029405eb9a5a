#!/usr/bin/env bash
# Landing call for the broad experts' class (2026-12-07, eighth session):
# prebuilt binaries carried packed in build-carry/ (new-nvfp4moe.xz,
# new-gpu-tests.xz: the branch; base-nvfp4moe.xz: main before it). The GPU
# tests the change touches, the same-call A/B of main against the branch on
# the prefill cases the policy gives broad experts (96 or more rows per
# expert), compute-sanitizer's memcheck, racecheck and initcheck subsets
# (scripts/gpu-check.sh's, with the layer's broad-experts test), and the
# branch with the class forced on (NVFP4MOE_BROAD_EXPERTS=1) against its
# policy where the policy leaves it off (deepseek T = 2048, 64 rows each).
#   bench/results/ncu/2026-12-07-broad-experts.sh OUTDIR COMMIT
set -u
out=$1; commit=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/new/tests /tmp/base "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/new-nvfp4moe.xz /tmp/new/nvfp4moe
unpack build-carry/new-gpu-tests.xz /tmp/new/tests/nvfp4moe_gpu_tests
unpack build-carry/base-nvfp4moe.xz /tmp/base/nvfp4moe
/tmp/base/nvfp4moe --version; /tmp/new/nvfp4moe --version
filter='*Broad*:*DevicePlanEqualsCpuPlan*:*LightExperts*:*SchedulesBitIdentical*:*WideTileWidthSets*:*EveryTileOverOddAndEvenKBlocks*:*SwiGLUWideTiles*:CudaHostPolicy.*:*OverlappedLaunches*:GpuMoeLayer.QwenShapePrefill:*SlotRows*'
(cd /tmp && timeout 400 /tmp/new/tests/nvfp4moe_gpu_tests --gtest_filter="$filter" > "$out/gpu-tests.log" 2>&1)
echo "gpu tests rc=$?"; tail -n 3 "$out/gpu-tests.log"; grep -E "^\[  FAILED" "$out/gpu-tests.log" | head
# BROAD_AB_CASES replaces the A/B's case lists ("args;args..."); BROAD_FORCED=0
# leaves out the forced deepseek runs (a call on little device time).
AB_REPS=${AB_REPS:-2} "$here/2026-12-07-two-binaries-ab.sh" /tmp/base/nvfp4moe /tmp/new/nvfp4moe "$out/ab" \
  "${BROAD_AB_CASES:---preset qwen3-30b-a3b --op gate_up,down,layer --tokens 2048 --routing uniform,zipf:1.2,balanced;\
--preset mixtral-8x7b --op gate_up,down --tokens 512 --routing uniform,zipf:1.2;\
--preset gpt-oss-20b --op gate_up,down --tokens 1024,2048 --routing uniform;\
--preset qwen3-30b-a3b --op gate_up,down --tokens 8192 --routing uniform,zipf:1.2;\
--preset mixtral-8x7b,deepseek-v3 --op gate_up,down --tokens 8192 --routing uniform}" > /dev/null
tail -n 2 "$out/ab/ab.txt"
NVFP4MOE_SKIP_TESTS=1 NVFP4MOE_SKIP_BENCH=1 NVFP4MOE_TORCH_PEERS=0 NVFP4MOE_COMMIT=$commit NVFP4MOE_PREBUILT=/tmp/new \
  scripts/gpu-check.sh "$out/check" > "$out/gpu-check.log" 2>&1
echo "gpu-check rc=$?"; grep -E "memcheck|racecheck|initcheck" "$out/gpu-check.log" | tail -n 3
[ "${BROAD_FORCED:-1}" = 0 ] && exit 0
for rep in 1 2; do
  for tag in policy forced; do
    env $([ $tag = forced ] && echo NVFP4MOE_BROAD_EXPERTS=1) timeout 120 /tmp/new/nvfp4moe bench --device cuda \
      --preset deepseek-v3 --op gate_up,down,layer --tokens 2048 --routing uniform,zipf:1.2 2>/dev/null |
      awk -F'|' -v tag="$tag" -v sfx="" -f "$here/bench_rows.awk" >> "$out/forced.txt"
  done
done
wc -l "$out/forced.txt"
