#!/usr/bin/env bash
# Experiment only (not part of the library): where the wide kernel's
# non-memory time goes, and two weight-streamer shapes. Builds once, then
# rebuilds the CLI with one change at a time and times the same cases.
set -u
out=$1; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1
g=src/cuda/sm90/nvfp4_grouped_gemm.cuh
w=src/cuda/weight_streamer.cu
cp $g /tmp/g.orig; cp $w /tmp/w.orig
rebuild() { cmake --build build-gpu --target nvfp4moe -j 16 > /tmp/b.log 2>&1 || { echo "build failed: $1" | tee -a $out/diag2.txt; tail -5 /tmp/b.log; }; }
bench() {
  timeout 60 build-gpu/nvfp4moe bench --device cuda --preset $2 --tokens $3 --op gate_up --schedule compact 2>/dev/null |
    grep -E "^\| (qwen|deep)" | awk -F'|' -v tag="$1" '{printf "%-16s %s %s T=%s %s us\n", tag, $2, $3, $4, $7}' | tee -a $out/diag2.txt
}
prefill() { bench $1 qwen3-30b-a3b,deepseek-v3 2048; }
decode() { bench $1 qwen3-30b-a3b,deepseek-v3,mixtral-8x7b 1; }
rebuild base; prefill base; decode base
sed -i 's/    epilogue_store<kConsumers>(p, w, s.tile/    if (false) epilogue_store<kConsumers>(p, w, s.tile/' $g
rebuild no_epi; prefill no_epilogue_store
sed -i 's/if (row < width) ptx::cp_async_16/if (false \&\& row < width) ptx::cp_async_16/; s/mbarrier_arrive_expect_tx(&s.full\[ps.stage\], chunks \* kSm90ChunkBytes)/mbarrier_arrive_expect_tx(\&s.full[ps.stage], 0)/; s/for (int c = 0; c < chunks; ++c)/for (int c = 0; c < 0; ++c)/' $g
rebuild mma_only; prefill no_loads_no_epi
cp /tmp/g.orig $g
sed -i 's/^constexpr int kUnroll = 4;/constexpr int kUnroll = 8;/; s/__launch_bounds__(kThreads, 2)/__launch_bounds__(kThreads, 1)/' $w
rebuild unroll8; decode stream_unroll8
cp /tmp/w.orig $w
sed -i 's/^constexpr int kThreads = 256;/constexpr int kThreads = 512;/; s/__launch_bounds__(kThreads, 2)/__launch_bounds__(kThreads, 1)/' $w
rebuild t512; decode stream_512thr
cp /tmp/w.orig $w
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/diag2.txt
