#!/usr/bin/env bash
# Experiment only (not part of the library): the same bench cases from
# several builds in one call, alternating, so that the comparison shares a
# GPU and its clocks. Each older tree is a `git archive` of a commit,
# unpacked beside this tree: .base/ (tag "base") and, if present, .mid/
# (tag "mid"); this tree is "new".
#   [AB_REPS=2] bench/results/ncu/2026-11-30-ab.sh OUTDIR "bench args;bench args..."
# bench/results/ncu/ab2json.py turns OUTDIR/ab.txt into a results file (with the
# "µs in a graph of 8" column where the bench prints one: T <= 32). A case run
# with --x-dtype f32 has its op tagged -f32x (gate_up-f32x).
# AB_GPU_TESTS="gtest filter" also runs those GPU tests of the new tree, and
# AB_RACECHECK="gtest filter" compute-sanitizer racecheck on those: the
# status run's racecheck found a hazard report that a change's A/B call,
# which ran tests only, had not (reliability.md, twenty-first session).
set -u
out=$1; cases=$2; mkdir -p $out
rows_awk=$(cd "$(dirname "$0")" && pwd)/bench_rows.awk
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
build() {
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1 && cmake --build $2 --target nvfp4moe -j 16 > /tmp/b.log 2>&1 || tail -5 /tmp/b.log
}
tags="base"
build .base build-base
if [ -d .mid ]; then build .mid build-mid; tags="$tags mid"; fi
build . build-new
tags="$tags new"
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq ${AB_REPS:-2}); do
  # Even repetitions run the builds in reverse order: on a bimodal case the
  # first cases of a call ran faster, which leaned the minima towards the
  # build that always went first (perf.md, twenty-fourth session).
  order=$tags
  [ $((rep % 2)) = 0 ] && order=$(echo $tags | tr ' ' '\n' | tac | tr '\n' ' ')
  for b in $order; do
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      timeout 120 build-$b/nvfp4moe bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$b" -v sfx="$(case "$c" in *"--x-dtype f32"*) echo -f32x;; esac)" -f "$rows_awk" |
        tee -a $out/ab.txt
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/ab.txt
if [ -n "${AB_GPU_TESTS:-}${AB_RACECHECK:-}" ]; then
  cmake --build build-new --target nvfp4moe_gpu_tests -j 16 > $out/build-tests.log 2>&1 || tail -20 $out/build-tests.log
  if [ -n "${AB_GPU_TESTS:-}" ]; then
    timeout 300 build-new/tests/nvfp4moe_gpu_tests --gtest_filter="$AB_GPU_TESTS" > $out/gpu-tests.log 2>&1
    echo "gpu tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $out/gpu-tests.log | tr '\n' ' ')"
  fi
  if [ -n "${AB_RACECHECK:-}" ]; then
    timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 build-new/tests/nvfp4moe_gpu_tests \
      --gtest_filter="$AB_RACECHECK" > $out/racecheck.log 2>&1
    echo "racecheck rc $?: $(grep -E 'RACECHECK SUMMARY' $out/racecheck.log)"
  fi
fi
