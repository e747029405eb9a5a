#!/usr/bin/env bash
# One device call for a change landed on main whose binaries were built
# here (2026-12-07, sixth session): unpack the stripped, xz-packed binaries
# carried in build-carry/ (three unpacked binaries exceed the call's 64 MiB),
# run scripts/gpu-check.sh on the new build (GPU tests, compute-sanitizer,
# decode bench with the torch peers unless LANDING_BENCH=0), then the same-call A/B of the base and
# new binaries on the layer at decode sizes.
#   bench/results/ncu/2026-12-07-landing-call.sh OUTDIR COMMIT
# LANDING_BENCH_ARGS replaces the decode bench arguments (a status run's
# prefill sweep, say); LANDING_AB_ARGS the A/B cases ("args;args...").
set -u
out=$1; commit=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/new/tests /tmp/base "$out"
unpack() { python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" "$1" "$2" && chmod +x "$2"; }
unpack build-carry/new-nvfp4moe.xz /tmp/new/nvfp4moe
unpack build-carry/new-gpu-tests.xz /tmp/new/tests/nvfp4moe_gpu_tests
unpack build-carry/base-nvfp4moe.xz /tmp/base/nvfp4moe
/tmp/base/nvfp4moe --version; /tmp/new/nvfp4moe --version
# LANDING_BENCH=0: tests and sanitizer only (the A/B below times the change).
skip=()
[ "${LANDING_BENCH:-1}" = 0 ] && skip=(NVFP4MOE_SKIP_BENCH=1 NVFP4MOE_TORCH_PEERS=0)
bench_args=${LANDING_BENCH_ARGS:---preset qwen3-30b-a3b,deepseek-v3,gpt-oss-20b,mixtral-8x7b --routing uniform,zipf:1.2 --tokens 1,2,4,8,9,12,16}
# shellcheck disable=SC2086
env "${skip[@]}" NVFP4MOE_COMMIT=$commit NVFP4MOE_PREBUILT=/tmp/new scripts/gpu-check.sh "$out/dec" $bench_args \
  > "$out/gpu-check.log" 2>&1
echo "gpu-check rc=$?"; grep -E "tests ran|PASSED|FAILED|rc=|results.json" "$out/gpu-check.log" | head -n 12
AB_REPS=${AB_REPS:-3} "$here/2026-12-07-two-binaries-ab.sh" /tmp/base/nvfp4moe /tmp/new/nvfp4moe "$out/ab" \
  "${LANDING_AB_ARGS:---preset qwen3-30b-a3b,gpt-oss-20b,deepseek-v3,mixtral-8x7b --op layer --tokens 1,2,4,8,12,16 --routing uniform,zipf:1.2}" \
  > /dev/null
tail -n 3 "$out/ab/ab.txt"
