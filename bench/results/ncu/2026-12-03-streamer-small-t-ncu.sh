#!/usr/bin/env bash
# Experiment only (not part of the library): ncu of the weight streamer that
# staged its activation rows in B-fragment order (.base/, a git archive of
# 802ba60) and of this tree's (rows staged whole, read by ldmatrix), on the
# cases that lost most at T = 1 (deepseek gate_up 0.85x, down 0.91x), to
# say where the time went.
#   bench/results/ncu/2026-12-03-streamer-small-t-ncu.sh OUTDIR
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
for c in "--preset deepseek-v3 --tokens 1 --op gate_up" "--preset deepseek-v3 --tokens 1 --op down"; do
  for b in base new; do
    timeout 150 ncu --clock-control none -k "regex:weight_stream" --launch-skip 4 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats \
      --section SourceCounters --import-source no -o /tmp/prof -f \
      build-$b/nvfp4moe bench --device cuda --reps 3 --routing uniform $c > /tmp/ncu-run.log 2>&1
    { echo "######## ncu $b ($(cat $( [ $b = base ] && echo .base/tools/COMMIT || echo tools/COMMIT))): $c";
      ncu --import /tmp/prof.ncu-rep --page details;
      echo "==== hottest SASS (stall samples)";
      ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null |
        python3 scripts/ncu_hot_lines.py 30; } >> $out/ncu.txt 2>&1 || tail -n 20 /tmp/ncu-run.log
  done
done
