#!/usr/bin/env bash
# Experiment only (not part of the library): the 256 x 128 wide tile
# (eb4aa00) against the 128 x 128 one before it (b2ece0c's kernel, copied
# from git into .old/ beside the tree), in one process lifetime each,
# alternating, on the cases that moved most in the first run; then ncu of
# the new wide kernel on two prefill cases.
set -u
out=$1; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
cfg() { cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1; }
cfg build-new && cmake --build build-new --target nvfp4moe -j 16 > /tmp/b1.log 2>&1 || tail -5 /tmp/b1.log
cp .old/nvfp4_grouped_gemm.cuh .old/nvfp4_grouped_gemm.cu src/cuda/sm90/
cfg build-old && cmake --build build-old --target nvfp4moe -j 16 > /tmp/b2.log 2>&1 || tail -5 /tmp/b2.log
bench() {  # tag build preset tokens ops
  timeout 120 $2/nvfp4moe bench --device cuda --preset $3 --tokens $4 --op $5 --schedule compact,rect 2>/dev/null |
    grep -E "^\| [a-z]" | grep -v "^| preset" | awk -F'|' -v tag="$1" '{printf "%-4s %s %s T=%s %s %s %s us\n", tag, $2, $3, $4, $5, $6, $7}' | tee -a $out/diag3.txt
}
for rep in 1 2; do
  for b in old new; do
    bench $b build-$b mixtral-8x7b 16,128 down,layer
    bench $b build-$b gpt-oss-20b,deepseek-v3 128 down
    bench $b build-$b qwen3-30b-a3b 2048 gate_up
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/diag3.txt
for c in "--preset qwen3-30b-a3b --tokens 2048 --op gate_up" "--preset deepseek-v3 --tokens 2048 --op gate_up --routing zipf:1.2"; do
  timeout 200 ncu --clock-control none -k "regex:grouped_gemm" --launch-skip 4 --launch-count 1 --set full \
    --import-source no -o /tmp/prof -f build-new/nvfp4moe bench --device cuda --reps 3 $c > /tmp/ncu-run.log 2>&1
  { echo "######## ncu: $c"; ncu --import /tmp/prof.ncu-rep --page details;
    echo "==== hottest SASS (stall samples)";
    ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null |
      python3 scripts/ncu_hot_lines.py 40; } >> $out/ncu.txt 2>&1 || tail -n 20 /tmp/ncu-run.log
done
