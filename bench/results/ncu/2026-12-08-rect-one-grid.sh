#!/usr/bin/env bash
# Experiment (2026-12-08, ninth session, prepared; perf.md Next item 13(b)):
# the rect schedule as one rectangular grid without expert classes (branch
# exp/rect-one-grid), against main, whose rect runs each class as a grid of
# its own. Binaries built on the dev machine and carried packed in
# build-carry/ (main-f270dc3-*, exp-rectclean-c20c24e-*: the branch with the
# plan's per-expert class array removed, exp/rect-one-grid-clean, which is
# what would land). The branch's schedule, class, plan and rect tests first
# (rect must still give compact's bits), then the same-call A/B; the bench
# times both schedules of every case.
#   bench/results/ncu/2026-12-08-rect-one-grid.sh OUTDIR
set -u
out=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/main /tmp/exp/tests /tmp/rect "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/main-f270dc3-nvfp4moe.xz /tmp/main/nvfp4moe
unpack build-carry/exp-rectclean-c20c24e-nvfp4moe.xz /tmp/exp/nvfp4moe
unpack build-carry/exp-rectclean-c20c24e-nvfp4moe_gpu_tests.xz /tmp/exp/tests/nvfp4moe_gpu_tests
/tmp/main/nvfp4moe --version; /tmp/exp/nvfp4moe --version
(cd /tmp && timeout 300 /tmp/exp/tests/nvfp4moe_gpu_tests \
  --gtest_filter='*Schedules*:*Broad*:*LightExperts*:*OverlappedLaunches*:*Rect*:*DevicePlan*:*QwenShapePrefill*:*Class*:*Queue*' > "$out/gpu-tests.log" 2>&1)
echo "gpu tests rc=$?"; tail -n 3 "$out/gpu-tests.log"; grep -E "^\[  FAILED" "$out/gpu-tests.log" | head
AB_REPS=${AB_REPS:-2} "$here/2026-12-07-two-binaries-ab.sh" /tmp/main/nvfp4moe /tmp/exp/nvfp4moe /tmp/rect/ab \
  "--schedule compact,rect --preset qwen3-30b-a3b --op gate_up,down,layer --tokens 512,2048 --routing uniform,zipf:1.2;\
--schedule compact,rect --preset deepseek-v3 --op gate_up,down --tokens 2048 --routing uniform;\
--schedule compact,rect --preset mixtral-8x7b --op down --tokens 512 --routing uniform;\
--schedule compact,rect --preset gpt-oss-20b --op gate_up --tokens 1024 --routing uniform" > /dev/null
cp /tmp/rect/ab/ab.txt "$out/ab.txt"; tail -n 2 "$out/ab.txt"
