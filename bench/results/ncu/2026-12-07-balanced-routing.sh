#!/usr/bin/env bash
# Experiment (2026-12-07, seventh session): what the job list's remainder
# tiles cost, and whether a broad tile removes it. Balanced routing gives
# every expert T*k/E pairs, so at 128 rows per expert every expert is one
# 128-wide tile, where uniform routing's spread (sd ~11 rows) gives half the
# experts a second, narrow tile that dequantizes the expert's weights again;
# at 160 rows per expert every expert has that second tile. Each case runs
# under the library's policy and with the token tile forced to 128 (the wide
# kernel) and to 160 (the broad kernel, one wgmma width: every expert of
# 129-160 rows one tile), alternating, in one process per case list; the
# GPU tests run first. Prebuilt binaries are carried packed
# (build-carry/new-nvfp4moe.xz, new-gpu-tests.xz). The broad kernel and its
# tests were reverted after this ran (perf.md Next item 12): the w160 variant
# needs b97ec9b's tree; on later trees NVFP4MOE_BLOCK_ROWS=160 is ignored.
#   bench/results/ncu/2026-12-07-balanced-routing.sh OUTDIR
set -u
out=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/new/tests "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/new-nvfp4moe.xz /tmp/new/nvfp4moe
unpack build-carry/new-gpu-tests.xz /tmp/new/tests/nvfp4moe_gpu_tests
/tmp/new/nvfp4moe --version
# The broad kernel's tests and the host policy's (the rest of the suite runs
# code the branch leaves as it was).
timeout 300 /tmp/new/tests/nvfp4moe_gpu_tests \
  --gtest_filter="${GPU_TEST_FILTER:-*WideTileWidthSets*:*EveryTileOverOddAndEvenKBlocks*:*SwiGLUBroadTiles*:*SwiGLUWideTiles*:CudaHostPolicy.*}" \
  > "$out/gpu-tests.log" 2>&1
echo "gpu tests rc=$?"; tail -n 3 "$out/gpu-tests.log"
cases=(
  "--preset qwen3-30b-a3b --op gate_up,down --tokens 2048,2560 --routing uniform,balanced"
  "--preset mixtral-8x7b --op gate_up,down --tokens 512,640 --routing uniform,balanced,zipf:1.2"
  "--preset qwen3-30b-a3b --op gate_up,down,layer --tokens 2048 --routing zipf:1.2"
  "--preset gpt-oss-20b --op gate_up,down --tokens 1024 --routing uniform,balanced"
  "--preset qwen3-30b-a3b --op layer --tokens 2048 --routing uniform,balanced"
)
# Case list by case list, the three variants of each together, so that a
# call cut short still returns whole comparisons.
for rep in 1 2; do
  order="policy w128 w160"
  [ $rep = 2 ] && order="w160 w128 policy"
  for c in "${cases[@]}"; do
    for tag in $order; do
      case $tag in policy) rows=;; w128) rows=128;; w160) rows=160;; esac
      # shellcheck disable=SC2086
      env ${rows:+NVFP4MOE_BLOCK_ROWS=$rows} timeout 200 /tmp/new/nvfp4moe bench --device cuda $c 2>> "$out/stderr.txt" |
        awk -F'|' -v tag="$tag" -v sfx="" -f "$here/bench_rows.awk" >> "$out/ab.txt"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> "$out/ab.txt"
wc -l "$out/ab.txt"
