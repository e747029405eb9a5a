#!/usr/bin/env bash
# Experiment only (not part of the library): ablation of the 256 x 128 wide
# GEMM kernel (as at 29a93ba): the same bench with the activation gather
# (nox), the weight bulk copies (now), both (noload), and both plus the
# dequant (mmaonly: the fragment's code and scale words go to the tensor
# cores raw, the pure loop structure) removed; and one candidate, k16: each
# k16 step's dequant placed right before its own wgmma (a fence per step).
#   bench/results/ncu/2026-11-30-diag4.sh OUTDIR
set -u
out=$1; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
g=src/cuda/sm90/nvfp4_grouped_gemm.cuh
cp $g /tmp/g.orig
cat > /tmp/variant.py <<'PY'
import sys
NOX = [('if (row < width) ptx::cp_async_16', 'if (false && row < width) ptx::cp_async_16')]
NOW = [('ptx::mbarrier_arrive_expect_tx(&s.full[ps.stage], chunks * kSm90ChunkBytes);',
        'ptx::mbarrier_arrive_expect_tx(&s.full[ps.stage], 0);'),
       ('for (int c = 0; c < chunks; ++c)', 'for (int c = 0; c < 0; ++c)')]
DQ_OLD = '''      dequant_fragment(*reinterpret_cast<const uint4*>(f.codes), *reinterpret_cast<const uint2*>(f.scales),
                       kScaleCodeMul, abuf);
'''
NODQ = [(DQ_OLD, '''      { const uint4 cw = *reinterpret_cast<const uint4*>(f.codes); const uint2 sw = *reinterpret_cast<const uint2*>(f.scales);
        const uint32_t wv[4] = {cw.x, cw.y, cw.z, cw.w};
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) { abuf[q2][0] = wv[q2] & 0x3c003c00u; abuf[q2][1] = (wv[q2] ^ sw.x) & 0x3c003c00u;
          abuf[q2][2] = (wv[q2] >> 4) & 0x3c003c00u; abuf[q2][3] = (wv[q2] ^ sw.y) & 0x3c003c00u; } }
''')]
K16 = [(DQ_OLD + '''      const uint64_t desc = ptx::smem_desc_kmajor_sw128(st.x);
      ptx::wgmma_fence();
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        // k16 step: +32 bytes along the swizzled row, i.e. +2 in desc units.
        Mma::mma(acc[b], abuf[step], desc + 2 * step, kb > w.k_begin || step > 0);
      }
''', '''      const uint4 cw = *reinterpret_cast<const uint4*>(f.codes);
      const uint2 sw = *reinterpret_cast<const uint2*>(f.scales);
      const uint32_t words[4] = {cw.x, cw.y, cw.z, cw.w};
      const uint64_t desc = ptx::smem_desc_kmajor_sw128(st.x);
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        const uint32_t sc = step < 2 ? sw.x : sw.y;
        dequant_e2m1x8_bf16(words[step], scale_factor_bf16x2(sc, step % 2, kScaleCodeMul),
                            scale_factor_bf16x2(sc, 2 + step % 2, kScaleCodeMul), abuf[step]);
        ptx::wgmma_fence();
        Mma::mma(acc[b], abuf[step], desc + 2 * step, kb > w.k_begin || step > 0);
      }
''')]
V = {'base': [], 'nox': NOX, 'now': NOW, 'noload': NOX + NOW, 'mmaonly': NOX + NOW + NODQ, 'k16': K16}
p = 'src/cuda/sm90/nvfp4_grouped_gemm.cuh'
s = open(p).read()
for old, new in V[sys.argv[1]]:
    assert s.count(old) == 1, old
    s = s.replace(old, new)
open(p, 'w').write(s)
PY
vs="base nox now noload mmaonly k16"
for v in $vs; do
  cp /tmp/g.orig $g && python3 /tmp/variant.py $v
  cmake -S . -B build-$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg-$v.log 2>&1 &&
    cmake --build build-$v --target nvfp4moe -j 16 > /tmp/b-$v.log 2>&1 || { echo "build failed: $v"; tail -5 /tmp/b-$v.log; }
  grep -E "C75[0-9][0-9]|spill" /tmp/b-$v.log | sed "s/^/$v: /" | sort -u | head -4
done
cp /tmp/g.orig $g
for rep in 1 2; do
  for v in $vs; do
    for c in "--preset qwen3-30b-a3b,deepseek-v3 --tokens 2048 --op gate_up,down" "--preset mixtral-8x7b,gpt-oss-20b --tokens 8192 --op gate_up,down"; do
      # shellcheck disable=SC2086
      timeout 120 build-$v/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" |
        awk -F'|' -v tag="$v" -v rep=$rep '{gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4); gsub(/ /, "", $7); printf "%s %s %s %s T=%s %s\n", rep, tag, $2, $3, $4, $7}' | tee -a $out/diag4.txt
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/diag4.txt
