#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test with ctest (CUDA tests skip
# themselves without a GPU; the end-to-end MLP test trains on the CPU), then install the
# package and build and run the consumer project in tests/consumer against it, and last fuzz
# every parser for ${FUZZ_SECONDS:-30} seconds a target (scripts/fuzz.sh; FUZZ_SECONDS=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh test
scripts/build.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
prefix="$PWD/$build_dir/install"
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$build_dir/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
ninja -C "$build_dir/consumer"
"$build_dir/consumer/ft-consumer"
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  scripts/fuzz.sh
fi
