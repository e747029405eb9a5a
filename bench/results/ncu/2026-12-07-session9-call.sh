#!/usr/bin/env bash
# Ninth session's call, by the card that comes: on an H200 main's status run
# (prefill, with every GPU test and the sanitizers), which the issue's targets
# are stated on; on an H100 the class tests and exp/broad-first's A/B.
#   bench/results/ncu/2026-12-07-session9-call.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu"
if [[ "$gpu" == *H200* ]]; then
  "$here/2026-12-07-session9-status.sh" "$1/prefill" prefill 2>&1 | tail -n 40
else
  "$here/2026-12-07-session9-first.sh" "$1/first" 2>&1
fi
