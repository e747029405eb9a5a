#!/usr/bin/env bash
# One call on the GPU machine: build with ninja, run the GPU and CPU tests,
# compute-sanitizer on a conformance subset, and the CUDA benchmark.
#   scripts/gpu-check.sh OUTDIR [bench args...]
# Writes to OUTDIR: build.log, tests.log, sanitizer.log, bench.md (tables and
# the peer ratios), results.json (commit, GPU, date, command, test and
# sanitizer summaries, every bench record and every record of
# bench/peers/torch_grouped_mm.py run on the same presets, tokens and routing
# when python3 has torch, with the ratios).
# NVFP4MOE_NCU="bench args[;bench args...]" also profiles the GEMM kernel of
# each case with Nsight Compute into ncu.txt (details and hottest SASS lines).
# NVFP4MOE_SKIP_SANITIZER=1 and NVFP4MOE_SKIP_TESTS=1 leave those steps out;
# NVFP4MOE_COMMIT=<sha> sets the commit recorded in results.json.
# NVFP4MOE_PREBUILT=DIR skips the build and runs DIR/nvfp4moe and
# DIR/tests/nvfp4moe_gpu_tests (sm_90a binaries built elsewhere and carried
# with the call); the CPU suites, which need the whole build tree, are then
# not run here (CI runs them).
# Needs .deps/*.deb from scripts/fetch-gpu-deps.sh (carried with the call).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [bench args...]}
shift || true
bench_args=("$@")
cd "$(dirname "$0")/.."
mkdir -p "$out"
root=$PWD
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# NVFP4MOE_COMMIT names the commit where the caller knows it better than this
# tree's git metadata (the device tool's copy of a working tree can carry an
# older .git than the files it copies). A `git archive` export names its commit
# in tools/COMMIT (export-subst); inside a checkout, ask git.
commit=${NVFP4MOE_COMMIT:-$(head -n 1 tools/COMMIT 2>/dev/null)}
if [ -z "$commit" ] || [[ "$commit" == *Format* ]]; then
  commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit-dirty"
fi

step() { echo "== $* ($(date -u +%T))"; }

step "dependencies"
prefix=""
if ls .deps/*.deb >/dev/null 2>&1; then
  rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
  prefix="-DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr"
fi

prebuilt=${NVFP4MOE_PREBUILT:-}
bdir=${prebuilt:-build-gpu}
step "build"
if [ -n "$prebuilt" ]; then
  ls -l "$bdir/nvfp4moe" "$bdir/tests/nvfp4moe_gpu_tests" > "$out/build.log" 2>&1
  build_rc=$?
else
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release $prefix -DNVFP4MOE_BENCH=OFF > "$out/build.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" >> "$out/build.log" 2>&1
  build_rc=$?
fi
tail -n 5 "$out/build.log"
if [ $build_rc -ne 0 ]; then grep -E "error" "$out/build.log" | head -n 30; exit 1; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > /tmp/gpu.txt 2>&1
if command -v cuobjdump >/dev/null && [ -z "$prebuilt" ]; then
  sass_hgmma=$(cuobjdump -sass build-gpu/CMakeFiles/nvfp4moe.dir/src/cuda/sm90/nvfp4_grouped_gemm.cu.o 2>/dev/null | grep -c HGMMA)
  echo "HGMMA instructions in the grouped GEMM's SASS: $sass_hgmma" | tee -a "$out/build.log"
fi

step "tests"
# CPU suites through CTest; the GPU suite directly, so its NMSE lines are kept.
# Hard time limits: a hung kernel must not eat the lease.
# NVFP4MOE_SKIP_TESTS=1: a second bench run on a tree already tested in the
# same call (tests_rc is then recorded as -1, "not run").
if [ "${NVFP4MOE_SKIP_TESTS:-0}" = 1 ]; then
  echo "tests skipped (NVFP4MOE_SKIP_TESTS=1)" > "$out/tests.log"
  tests_rc=-1
else
  cpu_rc=0
  if [ -n "$prebuilt" ]; then
    echo "CPU suites not run (NVFP4MOE_PREBUILT)" > "$out/tests.log"
  else
    (cd build-gpu && ctest --output-on-failure -j 8 --timeout 300 -LE gpu) > "$out/tests.log" 2>&1
    cpu_rc=$?
  fi
  timeout ${NVFP4MOE_GPU_TEST_TIMEOUT:-240} "$bdir"/tests/nvfp4moe_gpu_tests >> "$out/tests.log" 2>&1
  gpu_rc=$?
  tests_rc=$(( cpu_rc != 0 || gpu_rc != 0 ))
fi
grep -E "tests passed|tests failed|\*\*\*Failed|^\[  (PASSED|FAILED)|tests ran" "$out/tests.log" | tail -n 15

step "compute-sanitizer"
san_rc=0
rm -f /tmp/sanitizer-summary.txt
if [ "${NVFP4MOE_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  gt=$bdir/tests/nvfp4moe_gpu_tests
  subset='GpuMulMatId.DequantIsExact*:GpuMulMatId.RaggedRouting:GpuMulMatId.DtypesAndSmallestShapes:GpuMulMatId.BadIds*:GpuMoeLayer.SwiGLUSeparateGateUp:GpuMoeLayer.DecodeEightTokensOaiMerged:GpuMoeLayer.BadIds*:GpuMoeLayer.LightExperts*:GpuMoeLayer.BroadExperts*'
  for tool in memcheck racecheck initcheck; do
    filter=$subset
    [ $tool = racecheck ] && filter='GpuMulMatId.RaggedRouting:GpuMulMatId.DtypesAndSmallestShapes:GpuMulMatId.WeightStreamerShapes:GpuMulMatId.WeightStreamerEightColumns:GpuMoeLayer.DecodeEightTokensOaiMerged:GpuMoeLayer.LightExperts*:GpuMoeLayer.BroadExperts*'
    echo "==== $tool: $gt --gtest_filter=$filter" >> "$out/sanitizer.log"
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $gt --gtest_filter="$filter" \
      > /tmp/sanitizer-$tool.log 2>&1
    rc=$?
    cat /tmp/sanitizer-$tool.log >> "$out/sanitizer.log"
    echo "$tool: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitizer-$tool.log | tail -n 1)" | tee -a /tmp/sanitizer-summary.txt
    [ $rc -ne 0 ] && san_rc=$rc
  done
fi

step "bench"
bench_rc=0
if [ "${NVFP4MOE_SKIP_BENCH:-0}" != 1 ]; then
  # Extra args select presets and tokens (e.g. --preset qwen3-30b-a3b --tokens 1,2048);
  # ops and schedules are fixed here so both schedules and both layer forms are compared.
  bench_cmd=("$bdir/nvfp4moe" bench --device cuda --json "$out/bench.json" --op gate_up,down,layer
             --schedule compact,rect "$@")
  timeout ${NVFP4MOE_BENCH_TIMEOUT:-300} "${bench_cmd[@]}" > "$out/bench.md" 2> /tmp/bench.err
  bench_rc=$?
  # The llama.cpp-style unfused layer, same cases, for the fusion ratio.
  if [ $bench_rc -eq 0 ] && [ "${NVFP4MOE_BENCH_UNFUSED:-1}" = 1 ]; then
    timeout ${NVFP4MOE_BENCH_TIMEOUT:-300} "$bdir/nvfp4moe" bench --device cuda --json "$out/bench-unfused.json" \
      "$@" --op layer --unfused >> "$out/bench.md" 2>> /tmp/bench.err
    bench_rc=$?
  fi
  cat "$out/bench.md"
  tail -n 3 /tmp/bench.err
fi

step "peers"
peer_rc=0
if [ "${NVFP4MOE_TORCH_PEERS:-1}" = 1 ] && python3 -c "import torch" 2>/dev/null; then
  # The same presets, tokens and routing as the bench arguments.
  peer_args=()
  while [ $# -gt 0 ]; do
    case "$1" in --preset|--tokens|--routing) peer_args+=("$1" "$2"); shift ;; esac
    shift
  done
  set -- "${bench_args[@]}"
  timeout ${NVFP4MOE_PEER_TIMEOUT:-240} python3 bench/peers/torch_grouped_mm.py "${peer_args[@]}" \
    --json "$out/peers.json" > /tmp/peers.md 2> /tmp/peers.err
  peer_rc=$?
  tail -n 3 /tmp/peers.err
fi

if [ -n "${NVFP4MOE_NCU:-}" ] && command -v ncu >/dev/null; then
  # Cases separated by ';', each profiled once, all into ncu.txt.
  IFS=';' read -r -a ncu_cases <<< "$NVFP4MOE_NCU"
  for case_args in "${ncu_cases[@]}"; do
    step "ncu: $case_args"
    # shellcheck disable=SC2086
    timeout 240 ncu --clock-control none -k "regex:${NVFP4MOE_NCU_KERNEL:-grouped_gemm|weight_stream}" \
      --launch-skip 4 --launch-count 1 --set full --import-source no -o /tmp/prof -f \
      "$bdir/nvfp4moe" bench --device cuda --reps 3 $case_args > /tmp/ncu-run.log 2>&1
    { echo "######## ncu: $case_args"; ncu --import /tmp/prof.ncu-rep --page details;
      echo "==== hottest SASS (stall samples)";
      ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass 2>/dev/null |
        python3 scripts/ncu_hot_lines.py 40; } >> "$out/ncu.txt" 2>&1 || tail -n 20 /tmp/ncu-run.log
  done
fi

python3 - "$out" "$commit" "$started" "$build_rc" "$tests_rc" "$san_rc" "$bench_rc" "$peer_rc" "$*" <<'PY'
import json, os, re, subprocess, sys
out, commit, started, b, t, s, bn, pr, args = sys.argv[1:10]
gpu = open("/tmp/gpu.txt").read().strip().splitlines()
tests = open(os.path.join(out, "tests.log")).read()
# CTest writes "100% tests passed out of N" when nothing failed.
m = re.search(r"(\d+)% tests passed(?:, (\d+) tests failed)? out of (\d+)", tests)
g = re.search(r"\[==========\] (\d+) tests from .* ran", tests)
gfail = re.search(r"\[  FAILED  \] (\d+) tests?, listed below", tests)
bench = []
for name in ("bench.json", "bench-unfused.json"):
    bp = os.path.join(out, name)
    if os.path.exists(bp):
        try:
            bench += json.load(open(bp))
        except Exception as e:
            bench.append({"error": f"{name}: {e}"})
peers = {}
pp = os.path.join(out, "peers.json")
if os.path.exists(pp):
    peers = json.load(open(pp))
    # The bench names Zipf routing "zipf1.2", the peer script "zipf:1.2".
    by_case = {(r["preset"], r["op"], r["tokens"], r["routing"].replace(":", "")): r for r in peers["records"]}
    rows = ["", "| preset | op | T | routing | nvfp4moe us | torch us | torch / nvfp4moe |", "|---|---|---|---|---|---|---|"]
    for r in bench:
        if r.get("schedule") != "compact" or r.get("unfused"):
            continue
        q = by_case.get((r["preset"], r["op"], r["tokens"], r["routing"].replace(":", "")))
        if q:
            key = "x_vs_torch_layer" if r["op"] == "layer" else "x_vs_torch_gemm"
            r[key] = q["us"] / r["us"]
            r["torch_us"] = q["us"]
            rows.append(f"| {r['preset']} | {r['op']} | {r['tokens']} | {r['routing']} | {r['us']:.1f} | "
                        f"{q['us']:.1f} ({q['peer']}) | {r[key]:.2f} |")
    with open(os.path.join(out, "bench.md"), "a") as f:
        f.write("\n".join(rows) + "\n")
    print("\n".join(rows))
rec = {
    "commit": commit, "date": started, "gpu": gpu[1] if len(gpu) > 1 else gpu,
    "command": "scripts/gpu-check.sh OUT " + args,
    "build_rc": int(b), "tests_rc": int(t), "sanitizer_rc": int(s), "bench_rc": int(bn),
    "cpu_tests": {"failed": int(m.group(2) or 0), "total": int(m.group(3))} if m else None,
    "gpu_tests": {"failed": int(gfail.group(1)) if gfail else 0, "total": int(g.group(1))} if g else None,
    "sanitizer": open("/tmp/sanitizer-summary.txt").read().splitlines()
                 if os.path.exists("/tmp/sanitizer-summary.txt") else [],
    "nmse": [l.strip() for l in tests.splitlines() if l.startswith("[ nmse")],
    "peer_rc": int(pr),
    "bench": bench,
    "peers": peers,
}
json.dump(rec, open(os.path.join(out, "results.json"), "w"), indent=1)
print("results.json written: cpu", rec["cpu_tests"], "gpu", rec["gpu_tests"], "sanitizer rc", s, "bench rc", bn)
PY
# Their records are inside results.json; fewer files come back from the GPU machine.
rm -f "$out/bench.json" "$out/bench-unfused.json" "$out/peers.json"
[ $tests_rc -le 0 ] && [ $san_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $peer_rc -eq 0 ]
