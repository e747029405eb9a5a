#!/usr/bin/env bash
# Experiment only (not part of the library): how the wide kernel's output
# writes cost it (perf.md Next item 9). Builds this tree and a copy without
# the BF16 rows store loop (outputs invalid; its K loop's SASS is the
# base's: ...-7a2b6a4-ablation-bf16-rows-epilogue.json), then profiles one
# GEMM launch of each case in both with Nsight Compute (full set, warp-stall
# sampling by SASS line), so the two profiles say which waits the stores
# lengthen: the consumers' full-stage waits (loads arriving later) or
# something else.
#   bench/results/ncu/2026-12-01-store-traffic-ncu.sh OUTDIR "bench args;bench args..."
# STP_PATCH_ONLY=1 only writes the ablated copy (.stp/) and exits: a check
# that the patch still applies to the tree.
set -u
out=$1; cases=$2; mkdir -p "$out"
rm -rf .stp && mkdir .stp && cp -r CMakeLists.txt README.md bench docs fuzz include scripts src tests tools .stp/
python3 - <<'PY'
p = '.stp/src/cuda/sm90/nvfp4_grouped_gemm.cuh'
s = open(p).read()
store = ('    epilogue_store_bf16_rows<Smem::kTileRows, kConsumerThreads, kN>(p, w, s.tile.bf16, Smem::kBf16TileStride, s.rows,\n'
         '                                                                     wg * 128 + t, p.n);\n')
assert s.count(store) == 1, "the BF16 rows store call moved: update the patch"
open(p, 'w').write(s.replace(store, ''))
PY
[ $? = 0 ] || exit 1  # an unpatched copy would be profiled as the no-store build
[ "${STP_PATCH_ONLY:-0}" = 1 ] && exit 0
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
build() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > "/tmp/cfg-$2.log" 2>&1 && cmake --build "$2" --target nvfp4moe -j 8 > "/tmp/b-$2.log" 2>&1 ||
    tail -5 "/tmp/b-$2.log"
}
build . build-stp-base & build .stp build-stp-nostore & wait
IFS=';' read -r -a list <<< "$cases"
for b in base nostore; do
  i=0
  for c in "${list[@]}"; do
    i=$((i + 1))
    echo "######## $b: $c" >> "$out/ncu.txt"
    # shellcheck disable=SC2086
    timeout 200 ncu --clock-control none -k "regex:grouped_gemm" --launch-skip 4 --launch-count 1 --set full \
      --import-source no -o /tmp/stp -f build-stp-$b/nvfp4moe bench --device cuda --reps 3 $c > /tmp/stp-run.log 2>&1 ||
      tail -n 5 /tmp/stp-run.log >> "$out/ncu.txt"
    { ncu --import /tmp/stp.ncu-rep --page details | grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Issued Warp|No Eligible|Active Warps|Eligible Warps"
      echo "==== hottest SASS (stall samples)"
      ncu --import /tmp/stp.ncu-rep --page source --csv --print-source sass 2>/dev/null | python3 scripts/ncu_hot_lines.py 30
    } >> "$out/ncu.txt" 2>&1
    # Every metric of the profile (stall reasons, L1/L2 store and load
    # traffic by unit), so the comparison is not limited to the lines above.
    ncu --import /tmp/stp.ncu-rep --page raw --csv > "$out/raw-$b-$i.csv" 2>&1
    # Every SASS line with its samples by stall reason (the columns the
    # lines above sum), to attribute each reason's growth to code.
    ncu --import /tmp/stp.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > "$out/source-$b-$i.csv.gz"
  done
done
