#!/usr/bin/env bash
# Tenth session: the status run of main (eb47b88: rect as one grid without
# classes) from binaries built here and carried packed in build-carry/
# (main-eb47b88-*; a later session rebuilds and repacks at its own commit),
# through scripts/gpu-check.sh with NVFP4MOE_PREBUILT, on whichever card
# comes (the file name says which).
#   bench/results/ncu/2026-12-08-session10-status.sh OUTDIR prefill|decode
# prefill: every GPU test (the sanitizers left out for device time; their
# last run over this code's classes was clean), T = 16..8192 with the peers;
# decode: T = 1..16 with the peers, tests and sanitizer left out (same
# binary, run in the prefill call).
set -u
out=$1; mode=$2
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu"
mkdir -p /tmp/pre/tests
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/main-eb47b88-nvfp4moe.xz /tmp/pre/nvfp4moe
unpack build-carry/main-eb47b88-nvfp4moe_gpu_tests.xz /tmp/pre/tests/nvfp4moe_gpu_tests
export NVFP4MOE_COMMIT=eb47b8859d2f8018e01a20c3bc218cbf692ecbcf NVFP4MOE_PREBUILT=/tmp/pre
presets=qwen3-30b-a3b,deepseek-v3,gpt-oss-20b,mixtral-8x7b
if [ "$mode" = prefill ]; then
  NVFP4MOE_SKIP_SANITIZER=1 scripts/gpu-check.sh "$out" --preset $presets --routing uniform,zipf:1.2 \
    --tokens 16,128,512,2048,8192 2>&1 | tail -n 40
else
  NVFP4MOE_SKIP_TESTS=1 NVFP4MOE_SKIP_SANITIZER=1 \
    scripts/gpu-check.sh "$out" --preset $presets --routing uniform,zipf:1.2 --tokens 1,2,4,8,9,12,16 2>&1 | tail -n 30
fi
