#!/usr/bin/env bash
# Where the wide kernel's time goes: rebuild the CLI with one part of the
# work removed and time qwen3 gate_up T=2048 (and deepseek) each way.
# Experiment only; never committed to the library.
set -u
out=$1
g=src/cuda/sm90/nvfp4_grouped_gemm.cuh
d=src/cuda/dequant.cuh
cp $g /tmp/g.orig; cp $d /tmp/d.orig
bench() {
  build-gpu/nvfp4moe bench --device cuda --preset qwen3-30b-a3b,deepseek-v3 --tokens 2048 --op gate_up,down --schedule compact 2>/dev/null | grep -E "^\| (qwen|deep)" | awk -F'|' -v tag="$1" '{printf "%-8s %s %s T=%s %s us\n", tag, $2, $3, $4, $7}' | tee -a $out/diag.txt
}
rebuild() { cmake --build build-gpu --target nvfp4moe -j 16 > /tmp/diag-build.log 2>&1 || { echo "build failed $1"; tail -20 /tmp/diag-build.log; }; }
bench base
sed -i 's/if (row < width) ptx::cp_async_16/if (false \&\& row < width) ptx::cp_async_16/' $g; rebuild skipx; bench skip_x
cp /tmp/g.orig $g
sed -i 's/mbarrier_arrive_expect_tx(&s.full\[ps.stage\], chunks \* kSm90ChunkBytes)/mbarrier_arrive_expect_tx(\&s.full[ps.stage], 0)/; s/for (int c = 0; c < chunks; ++c)/for (int c = 0; c < 0; ++c)/' $g; rebuild skipw; bench skip_w
sed -i 's/if (row < width) ptx::cp_async_16/if (false \&\& row < width) ptx::cp_async_16/' $g; rebuild skipxw; bench skip_xw
cp /tmp/g.orig $g
sed -i 's/a\[0\] = ptx::mul_bf16x2(p0, f_g);/a[0] = word;/; s/a\[1\] = ptx::mul_bf16x2(p1, f_g8);/a[1] = word ^ scales_g_g8;/; s/a\[2\] = ptx::mul_bf16x2(p2, f_g);/a[2] = word + 1u;/; s/a\[3\] = ptx::mul_bf16x2(p3, f_g8);/a[3] = word + 2u;/' $d; rebuild skipdq; bench skip_dq
cp /tmp/d.orig $d; rebuild restore
grep -c "a\[0\] = word" $d
