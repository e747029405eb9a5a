#!/usr/bin/env bash
# The GPU machine cannot reach any package registry. This downloads, here,
# the Debian packages its build needs (header-only: nlohmann-json, CLI11)
# into .deps/, which the device call carries and scripts/gpu-check.sh unpacks.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
[ -n "$(ls nlohmann-json3-dev_*.deb 2>/dev/null)" ] || apt-get download nlohmann-json3-dev
[ -n "$(ls libcli11-dev_*.deb 2>/dev/null)" ] || apt-get download libcli11-dev
ls -1 *.deb
