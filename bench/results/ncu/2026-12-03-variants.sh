#!/usr/bin/env bash
# Experiment only (not part of the library): the same bench cases from any
# number of trees in one call, alternating (reverse order on even
# repetitions), like 2026-11-30-ab.sh but for more than three builds.
#   [AB_REPS=2] bench/results/ncu/2026-12-03-variants.sh OUTDIR "tag=dir[+VAR=VALUE] ..." "bench args;bench args..."
# A tree named with +VAR=VALUE runs its bench with that environment variable
# set (one build per directory). Ops of --x-dtype f32 cases are tagged -f32x;
# bench/results/ncu/variants2json.py makes a results file of OUTDIR/ab.txt.
set -u
out=$1; trees=$2; cases=$3; mkdir -p $out
rows_awk=$(cd "$(dirname "$0")" && pwd)/bench_rows.awk
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
tags=""
declare -A dir_of env_of
for tv in $trees; do
  t=${tv%%=*}; d=${tv#*=}; e=""
  [[ "$d" == *+* ]] && { e=${d#*+}; d=${d%%+*}; }
  env_of[$t]=$e
  b=build-$(echo "$d" | tr -c 'a-zA-Z0-9\n' '_')
  [ -x $b/nvfp4moe ] || { cmake -S $d -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg.log 2>&1 && cmake --build $b --target nvfp4moe -j 16 > /tmp/b.log 2>&1 || tail -5 /tmp/b.log; }
  dir_of[$t]=$b
  tags="$tags $t"
done
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq ${AB_REPS:-2}); do
  order=$tags
  [ $((rep % 2)) = 0 ] && order=$(echo $tags | tr ' ' '\n' | tac | tr '\n' ' ')
  for b in $order; do
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      env ${env_of[$b]:-NVFP4MOE_VARIANT=$b} timeout 120 ${dir_of[$b]}/nvfp4moe bench --device cuda $c 2>/dev/null |
        awk -F'|' -v tag="$b" -v sfx="$(case "$c" in *"--x-dtype f32"*) echo -f32x;; esac)" -f "$rows_awk" |
        tee -a $out/ab.txt
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/ab.txt
