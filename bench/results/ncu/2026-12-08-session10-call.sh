#!/usr/bin/env bash
# Tenth session's first call, by the card that comes: on an H200 main's
# status run (prefill with every GPU test; the sanitizers left out for device
# time, their last run over this code was clean), which the issue's targets
# are stated on; on an H100 exp/rect-one-grid's tests and A/B (perf.md Next
# item 13(b)).
#   bench/results/ncu/2026-12-08-session10-call.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu"
if [[ "$gpu" == *H200* ]]; then
  NVFP4MOE_SKIP_SANITIZER=1 "$here/2026-12-07-session9-status.sh" "$1/prefill" prefill 2>&1 | tail -n 40
else
  "$here/2026-12-08-rect-one-grid.sh" "$1/rect" 2>&1
fi
