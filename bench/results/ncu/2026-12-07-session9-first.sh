#!/usr/bin/env bash
# Ninth session's first call (2026-12-07): main's GPU tests of the classes at
# f270dc3 (their shared runners had only compiled), then the prepared
# experiment exp/broad-first (perf.md Next item 12): its tests of the
# classes and a same-call A/B against main. Binaries built here and carried
# packed in build-carry/ (main-f270dc3-*, exp-bf-1dde541-*).
#   bench/results/ncu/2026-12-07-session9-first.sh OUTDIR
set -u
out=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/main/tests /tmp/exp/tests /tmp/s9 "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/main-f270dc3-nvfp4moe.xz /tmp/main/nvfp4moe
unpack build-carry/main-f270dc3-nvfp4moe_gpu_tests.xz /tmp/main/tests/nvfp4moe_gpu_tests
unpack build-carry/exp-bf-1dde541-nvfp4moe.xz /tmp/exp/nvfp4moe
unpack build-carry/exp-bf-1dde541-nvfp4moe_gpu_tests.xz /tmp/exp/tests/nvfp4moe_gpu_tests
/tmp/main/nvfp4moe --version; /tmp/exp/nvfp4moe --version
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
classes='*Broad*:*LightExperts*:*OverlappedLaunches*:*SchedulesBitIdentical*'
(cd /tmp && timeout 200 /tmp/main/tests/nvfp4moe_gpu_tests --gtest_filter="$classes" > "$out/main-f270dc3-gpu-tests.log" 2>&1)
echo "main tests rc=$?"; tail -n 3 "$out/main-f270dc3-gpu-tests.log"; grep -E "^\[  FAILED" "$out/main-f270dc3-gpu-tests.log" | head
(cd /tmp && timeout 200 /tmp/exp/tests/nvfp4moe_gpu_tests --gtest_filter="$classes" > "$out/exp-gpu-tests.log" 2>&1)
echo "exp tests rc=$?"; tail -n 3 "$out/exp-gpu-tests.log"; grep -E "^\[  FAILED" "$out/exp-gpu-tests.log" | head
AB_REPS=${AB_REPS:-2} "$here/2026-12-07-two-binaries-ab.sh" /tmp/main/nvfp4moe /tmp/exp/nvfp4moe /tmp/s9/ab \
  "--preset qwen3-30b-a3b --op gate_up,down,layer --tokens 2048 --routing uniform,zipf:1.2,balanced;\
--preset qwen3-30b-a3b --op gate_up,down --tokens 1536 --routing uniform;\
--preset mixtral-8x7b --op gate_up,down --tokens 512 --routing uniform,zipf:1.2;\
--preset gpt-oss-20b --op gate_up,down --tokens 1024 --routing uniform,zipf:1.2" > /dev/null
cp /tmp/s9/ab/ab.txt "$out/ab.txt"
tail -n 2 "$out/ab.txt"
# The class against no class on the cases where it lost (Zipf, balanced,
# T = 1536 down): main's binary with NVFP4MOE_BROAD_EXPERTS=0 as "new".
printf '#!/bin/sh\nNVFP4MOE_BROAD_EXPERTS=0 exec /tmp/main/nvfp4moe "$@"\n' > /tmp/main/no-broad && chmod +x /tmp/main/no-broad
AB_REPS=2 "$here/2026-12-07-two-binaries-ab.sh" /tmp/main/nvfp4moe /tmp/main/no-broad /tmp/s9/nobroad \
  "--preset qwen3-30b-a3b --op gate_up,down,layer --tokens 2048 --routing zipf:1.2,balanced;\
--preset qwen3-30b-a3b --op down --tokens 1536 --routing uniform" > /dev/null
cp /tmp/s9/nobroad/ab.txt "$out/ab-no-broad.txt"
# Where qwen3's T = 2048 time goes by expert class (target 4: Zipf ~15% behind
# uniform since the broad class): each class's launch timed on its own under
# ncu (three launches per call: 9 = the first three warm-up calls).
CD_LAUNCHES=9 timeout 150 "$here/2026-12-06-class-durations.sh" /tmp/main /tmp/s9/classes \
  "--preset qwen3-30b-a3b --op gate_up --tokens 2048 --routing uniform;\
--preset qwen3-30b-a3b --op gate_up --tokens 2048 --routing zipf:1.2;\
--preset qwen3-30b-a3b --op gate_up --tokens 2048 --routing balanced" > /dev/null 2>&1
echo "class durations rc=$?"; cp /tmp/s9/classes/durations.csv "$out/class-durations.csv"; cp /tmp/s9/classes/metrics.json "$out/class-metrics.json"
cat "$out/class-durations.csv" 2>/dev/null | head -n 40
