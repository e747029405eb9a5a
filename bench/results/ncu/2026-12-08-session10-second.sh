#!/usr/bin/env bash
# Tenth session's second call, on the machine the first left warm: on an
# H200 main's decode status run (T = 1..16 with the peers; the GPU tests ran
# in the first call), then exp/rect-one-grid-clean's tests and A/B unless
# the first call ran them (an H100 did).
#   bench/results/ncu/2026-12-08-session10-second.sh OUTDIR [rect]
set -u
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu"
if [[ "$gpu" == *H200* ]]; then
  "$here/2026-12-07-session9-status.sh" "$1/decode" decode 2>&1 | tail -n 30
fi
if [ "${2:-}" = rect ]; then
  "$here/2026-12-08-rect-one-grid.sh" "$1/rect" 2>&1
fi
