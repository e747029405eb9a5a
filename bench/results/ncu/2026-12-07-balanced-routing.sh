#!/usr/bin/env bash
# Experiment (2026-12-07, seventh session): what the job list's remainder
# tiles cost. Balanced routing gives every expert T*k/E pairs, so at 128 rows
# per expert every expert is one 128-wide tile, where uniform routing's spread
# (sd ~11 rows) gives half the experts a second, narrow tile that dequantizes
# the expert's weights again; at 160 rows per expert every expert has that
# second tile. The prebuilt binary is carried packed (build-carry/new-nvfp4moe.xz).
#   bench/results/ncu/2026-12-07-balanced-routing.sh OUTDIR
set -u
out=$1
mkdir -p /tmp/new "$out"
python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" \
  build-carry/new-nvfp4moe.xz /tmp/new/nvfp4moe && chmod +x /tmp/new/nvfp4moe
/tmp/new/nvfp4moe --version
cases=(
  "--preset qwen3-30b-a3b --op gate_up,down --tokens 1920,2048,2560,8192"
  "--preset qwen3-30b-a3b --op layer --tokens 2048"
  "--preset mixtral-8x7b --op gate_up,down --tokens 512,640"
  "--preset gpt-oss-20b --op gate_up,down --tokens 1024,2048"
)
for rep in 1 2; do
  for i in "${!cases[@]}"; do
    # shellcheck disable=SC2086
    timeout 200 /tmp/new/nvfp4moe bench --device cuda ${cases[$i]} --routing uniform,balanced \
      --json "$out/rep$rep-case$i.json" > "$out/rep$rep-case$i.md" 2>> "$out/stderr.txt"
    echo "rep $rep case $i rc=$?"
  done
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> "$out/gpu.txt"
