#!/usr/bin/env bash
# Tenth session: main's status run (eb47b88) in one call, prefill (with
# every GPU test) then decode, on whichever card comes; only the files the
# results need come back (results.json, bench.md, tests.log per mode), to
# stay under the device's eight files.
#   bench/results/ncu/2026-12-08-session10-both.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out/prefill" "$out/decode"
timeout 430 "$here/2026-12-08-session10-status.sh" /tmp/st-prefill prefill
for f in results.json bench.md tests.log; do cp /tmp/st-prefill/$f "$out/prefill/" 2>/dev/null; done
timeout 150 "$here/2026-12-08-session10-status.sh" /tmp/st-decode decode
for f in results.json bench.md; do cp /tmp/st-decode/$f "$out/decode/" 2>/dev/null; done
ls -la "$out"/*
