#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, replays the saved regressions, then
# fuzzes each target for FUZZ_SECONDS (default 60) from a generated seed corpus.
#   fuzz/run_all.sh [target ...]     targets: gguf safetensors npy plan
# Crash inputs land in $build/artifacts/; keep new ones in fuzz/regressions/
# as <target>_<what>, and add a unit test for the bug.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${NVFP4MOE_FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf safetensors npy plan)

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNVFP4MOE_CUDA=OFF \
  -DNVFP4MOE_FUZZ=ON -DNVFP4MOE_TESTS=OFF -DNVFP4MOE_BENCH=OFF >/dev/null
cmake --build "$build" -j "${NVFP4MOE_JOBS:-2}" --target fuzz_make_seeds "${targets[@]/%/_fuzz}"
"$build/fuzz/fuzz_make_seeds" "$build/seeds"
mkdir -p "$build/artifacts" "$build/logs"

declare -A extra=(
  [gguf]="-dict=fuzz/gguf.dict -max_len=8192"
  [safetensors]="-dict=fuzz/safetensors.dict -max_len=16384"
  [npy]="-max_len=4096"
  [plan]="-max_len=4096"
)
for t in "${targets[@]}"; do
  bin="$build/fuzz/${t}_fuzz"
  regressions=(fuzz/regressions/"${t}"_*)
  if [ -e "${regressions[0]}" ]; then
    "$bin" "${regressions[@]}" >"$build/logs/${t}_regressions.log" 2>&1 ||
      { tail -n 80 "$build/logs/${t}_regressions.log" >&2; echo "fuzz: $t regression replay failed" >&2; exit 1; }
  fi
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  cp -n "$build/seeds/$t"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $t for ${seconds}s"
  # The whole log is kept ($build/logs); a failure prints its end (the
  # sanitizer report and the crashing input's path).
  # shellcheck disable=SC2086
  if ! "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/${t}_" ${extra[$t]} "$corpus" >"$build/logs/$t.log" 2>&1; then
    tail -n 80 "$build/logs/$t.log" >&2
    echo "fuzz: $t failed; the input is in $build/artifacts/" >&2
    exit 1
  fi
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec)" "$build/logs/$t.log"
done
