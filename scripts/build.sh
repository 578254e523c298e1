#!/usr/bin/env bash
# Configures and builds fusedtrain into ${BUILD_DIR:-build} with every core of this machine.
# Extra arguments go to CMake (e.g. -DFT_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build_dir" -j "$(nproc)"
