#!/usr/bin/env bash
# Ninth session: the status run of main (f270dc3) from binaries built here and
# carried packed in build-carry/ (main-f270dc3-*), through scripts/gpu-check.sh
# with NVFP4MOE_PREBUILT.
#   bench/results/ncu/2026-12-07-session9-status.sh OUTDIR prefill|decode
# prefill: every GPU test, the sanitizer subsets, T = 16..8192 with the peers;
# decode: T = 1..16 with the peers, tests and sanitizer left out (same binary,
# run in the prefill call).
set -u
out=$1; mode=$2
mkdir -p /tmp/pre/tests
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/main-f270dc3-nvfp4moe.xz /tmp/pre/nvfp4moe
unpack build-carry/main-f270dc3-nvfp4moe_gpu_tests.xz /tmp/pre/tests/nvfp4moe_gpu_tests
export NVFP4MOE_COMMIT=f270dc39a3f0160827822ec7d1fd726d39d2ec83 NVFP4MOE_PREBUILT=/tmp/pre
presets=qwen3-30b-a3b,deepseek-v3,gpt-oss-20b,mixtral-8x7b
if [ "$mode" = prefill ]; then
  scripts/gpu-check.sh "$out" --preset $presets --routing uniform,zipf:1.2 --tokens 16,128,512,2048,8192
else
  NVFP4MOE_SKIP_TESTS=1 NVFP4MOE_SKIP_SANITIZER=1 \
    scripts/gpu-check.sh "$out" --preset $presets --routing uniform,zipf:1.2 --tokens 1,2,4,8,9,12,16
fi
