#!/usr/bin/env bash
# Experiment only (not part of the library): plan times of two builds in one
# call, alternating, by 2026-12-01-plan-timeline-probe.cu (graphs of 8 plans,
# E = 128, k = 8, T = 1 .. 8192, and the probe's floors). .base/ holds the
# older tree (a `git archive`), .mid/ (if present) a second one, this tree is
# "new".
#   [AB_REPS=2] bench/results/ncu/2026-12-01-plan-ab.sh OUTDIR
set -u
out=$1; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
probe() {  # tree build-dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1 && cmake --build $2 --target nvfp4moe -j 16 > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; return 1; }
  nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I$1/include bench/results/ncu/2026-12-01-plan-timeline-probe.cu \
    $(find $2 -name libnvfp4moe.a | head -1) -lcublas -lcublasLt -lpthread -o $2/plan-probe
}
tags="base"
probe .base build-base || exit 1
if [ -d .mid ]; then probe .mid build-mid || exit 1; tags="$tags mid"; fi
probe . build-new || exit 1
tags="$tags new"
for rep in $(seq ${AB_REPS:-2}); do
  for b in $tags; do
    build-$b/plan-probe /dev/null | sed "s/^/$b /" | tee -a $out/plan-ab.txt
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/plan-ab.txt
