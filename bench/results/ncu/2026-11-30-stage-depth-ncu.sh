#!/usr/bin/env bash
# Experiment only (not part of the library): ncu of the narrow tile with one K
# block per stage (.base/, a git archive of 166ffd9) and with two (this tree),
# on the case that moved most (deepseek gate_up T = 128: 1.42x) and on qwen3
# gate_up T = 16, to say where the two-K-block stage's time went.
#   bench/results/ncu/2026-11-30-stage-depth-ncu.sh OUTDIR
set -u
out=$1; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
build() {
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1 && cmake --build $2 --target nvfp4moe -j 16 > /tmp/b.log 2>&1 || tail -5 /tmp/b.log
}
build .base build-base
build . build-new
for c in "--preset deepseek-v3 --tokens 128 --op gate_up" "--preset qwen3-30b-a3b --tokens 16 --op gate_up"; do
  for b in base new; do
    timeout 150 ncu --clock-control none -k "regex:grouped_gemm" --launch-skip 4 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section MemoryWorkloadAnalysis --section SourceCounters --import-source no -o /tmp/prof -f \
      build-$b/nvfp4moe bench --device cuda --reps 3 --routing uniform --schedule compact $c > /tmp/ncu-run.log 2>&1
    { echo "######## ncu $b ($(cat $( [ $b = base ] && echo .base/tools/COMMIT || echo tools/COMMIT))): $c";
      ncu --import /tmp/prof.ncu-rep --page details;
      echo "==== hottest SASS (stall samples)";
      ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null |
        python3 scripts/ncu_hot_lines.py 30; } >> $out/ncu.txt 2>&1 || tail -n 20 /tmp/ncu-run.log
  done
done
