#!/usr/bin/env bash
# The two set-up commands of the README:
#   scripts/dev.sh bench   build, then run `nvfp4moe bench` on its built-in default
#   scripts/dev.sh test    build, then run the whole test suite (ctest)
# Installs what is missing (Debian packages as root, Python packages into
# .venv from PyPI), or prints the exact apt line when it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}
build=${NVFP4MOE_BUILD_DIR:-build}
jobs=${NVFP4MOE_JOBS:-$(nproc)}

need_pkgs=()
for spec in cmake:cmake ninja:ninja-build g++:g++ python3:python3; do
  command -v "${spec%%:*}" >/dev/null 2>&1 || need_pkgs+=("${spec#*:}")
done
for spec in /usr/include/gtest/gtest.h:libgtest-dev /usr/include/nlohmann/json.hpp:nlohmann-json3-dev \
            /usr/include/CLI/CLI.hpp:libcli11-dev /usr/include/benchmark/benchmark.h:libbenchmark-dev; do
  [ -e "${spec%%:*}" ] || need_pkgs+=("${spec#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "dev.sh: installing ${need_pkgs[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  else
    echo "dev.sh: missing packages; run: sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
fi

if [ "$mode" = test ]; then
  # Independent implementations for the cross-checks (tests/py), from PyPI.
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import gguf, safetensors, ml_dtypes, numpy, pytest" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r tests/py/requirements.txt
  fi
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${NVFP4MOE_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs"

case "$mode" in
  bench) shift || true; exec "$build/nvfp4moe" bench "$@" ;;
  test)  cd "$build" && exec ctest --output-on-failure -j "$jobs" ;;
  *) echo "usage: scripts/dev.sh bench|test" >&2; exit 2 ;;
esac
