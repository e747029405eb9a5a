#!/usr/bin/env bash
# Experiment (2026-12-07, eighth session, prepared; perf.md Next item 12):
# the broad experts' launch first rather than between the regular and the
# light launches (branch exp/broad-first), where an empty broad launch cost
# qwen3's gate_up at T = 2048 8.6 us. Prebuilt binaries carried packed in
# build-carry/: main-0937dc6-nvfp4moe.xz (main's library code since the
# class) and exp-nvfp4moe.xz, exp-gpu-tests.xz (the branch). The tests of
# the classes first, then the same-call A/B.
#   bench/results/ncu/2026-12-07-broad-first.sh OUTDIR
set -u
out=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/exp/tests /tmp/main "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/main-0937dc6-nvfp4moe.xz /tmp/main/nvfp4moe
unpack build-carry/exp-nvfp4moe.xz /tmp/exp/nvfp4moe
unpack build-carry/exp-gpu-tests.xz /tmp/exp/tests/nvfp4moe_gpu_tests
/tmp/main/nvfp4moe --version; /tmp/exp/nvfp4moe --version
(cd /tmp && timeout 300 /tmp/exp/tests/nvfp4moe_gpu_tests \
  --gtest_filter='*Broad*:*LightExperts*:*OverlappedLaunches*:*SchedulesBitIdentical*' > "$out/gpu-tests.log" 2>&1)
echo "gpu tests rc=$?"; tail -n 3 "$out/gpu-tests.log"; grep -E "^\[  FAILED" "$out/gpu-tests.log" | head
AB_REPS=${AB_REPS:-2} "$here/2026-12-07-two-binaries-ab.sh" /tmp/main/nvfp4moe /tmp/exp/nvfp4moe "$out/ab" \
  "--preset qwen3-30b-a3b --op gate_up,down,layer --tokens 2048 --routing uniform,zipf:1.2,balanced;\
--preset qwen3-30b-a3b --op gate_up,down --tokens 1536 --routing uniform;\
--preset mixtral-8x7b --op gate_up,down --tokens 512 --routing uniform,zipf:1.2;\
--preset gpt-oss-20b --op gate_up,down --tokens 1024 --routing uniform,zipf:1.2" > /dev/null
tail -n 2 "$out/ab/ab.txt"
