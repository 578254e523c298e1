#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang, ASan, UBSan) into ${FUZZ_BUILD_DIR:-build-fuzz}
# and runs each for ${FUZZ_SECONDS:-30} seconds, starting from its corpus tests/fuzz/<target>/.
# A crash, leak, UB report, uncaught exception, timeout (10 s an input) or an allocation past
# 2 GB fails the script once every target has run; the input that found it is left in
# <build>/artifacts/<target>/. Fix the parser, then copy the input into tests/fuzz/<target>/ as
# regress-<what-it-found> (the test suite replays it). Arguments name targets (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
cmake -S tests/fuzz -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++}" >/dev/null
ninja -C "$build_dir" -j "$(nproc)"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets <"$build_dir/targets.txt"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=()
for target in "${targets[@]}"; do
  corpus="$build_dir/corpus/$target"  # what this run finds; tests/fuzz/$target is only read
  artifacts="$build_dir/artifacts/$target/"
  log="$build_dir/$target.log"
  mkdir -p "$corpus" "$artifacts"
  dict=()  # the format's keywords and edge values, where the target has them
  [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
  # -close_fd_mask=1: the parsers' stdout (ft-mlp's --help) would drown libFuzzer's lines.
  if "$build_dir/${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
       -close_fd_mask=1 -print_final_stats=1 "${dict[@]}" -artifact_prefix="$artifacts" "$corpus" "tests/fuzz/$target" \
       >"$log" 2>&1; then
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    echo "fuzz $target: $runs inputs in ${seconds}s, no failure"
  else
    failed+=("$target")
    echo "fuzz $target: FAILED; the input is in $artifacts"
    tail -n 60 "$log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing failed: ${failed[*]}"
  exit 1
fi
