#!/usr/bin/env bash
# On the GPU machine: an A/B of the gpt2-124M step between this tree and an earlier one carried
# beside it. The same code measures 30.1-30.9 ms from one device call to the next, so a change
# worth a few tenths of a millisecond shows only in runs alternated within one call.
#
#   here:   rm -rf ab-base && mkdir ab-base && git archive REV | tar x -C ab-base
#   device: scripts/device_ab.sh        (carry: ["ab-base"]; ab-base/ is git-ignored)
#
#   BASE_DIR=ab-base   the earlier tree
#   RUNS=3             runs of each tree, alternated (base first)
#   BENCH_ARGS='--graph 1 --kernels fused'   ft-bench gpt2's arguments
#   BASE_BENCH_ARGS=...  the base side's, when they differ (default: BENCH_ARGS). With BASE_DIR=.
#                        both sides run this tree: an A/B of two settings (e.g. --gemm-tuning off)
# This tree's ft-bench autotunes its products (--gemm-tuning auto); a tree before session 26's
# does not, so an A/B of a kernel change against one passes --gemm-tuning off or both tune.
#   SKIP_BUILD=1       reuse build-device (this tree's, as device_check.sh builds it)
# Prints each run's GPU ms a step (ft-bench's median of CUDA events) and each tree's median;
# the logs go to $OUT/ab-logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
base=${BASE_DIR:-ab-base}
runs=${RUNS:-3}
bench_args=${BENCH_ARGS:---graph 1 --kernels fused}
base_bench_args=${BASE_BENCH_ARGS:-$bench_args}
logs=build-device/ab-logs
mkdir -p "$out" "$logs"
trap 'tar czf "$out/ab-logs.tgz" -C build-device ab-logs' EXIT
[ -d "$base" ] || { echo "no $base: see the header for how to make it"; exit 1; }

if [ -z "${SKIP_BUILD:-}" ]; then
  BUILD_DIR=build-device scripts/build.sh >"$logs/build-new.log" 2>&1 || {
    tail -30 "$logs/build-new.log"; echo "BUILD FAILED (this tree)"; exit 1; }
fi
# The earlier tree: ft-bench alone.
base_bench=$base/build-device/examples/ft-bench
[ "$base" = . ] && base_bench=build-device/examples/ft-bench
[ "$base" = . ] || (cmake -S "$base" -B "$base/build-device" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  ninja -C "$base/build-device" -j "$(nproc)" ft-bench) >"$logs/build-base.log" 2>&1 || {
  tail -30 "$logs/build-base.log"; echo "BUILD FAILED ($base)"; exit 1; }

declare -A times
for ((i = 1; i <= runs; ++i)); do
  for side in base new; do
    bench=build-device/examples/ft-bench args=$bench_args
    [ $side = base ] && bench=$base_bench args=$base_bench_args
    # shellcheck disable=SC2086  # the arguments split on purpose
    timeout 200 "$bench" gpt2 $args >"$logs/$side-$i.log" 2>&1 || tail -5 "$logs/$side-$i.log"
    ms=$(sed -n 's/^RESULT gpt2 .* ms=\([0-9.]*\) .*/\1/p' "$logs/$side-$i.log")
    echo "run $i $side: ${ms:-none} ms"
    times[$side]="${times[$side]:-} ${ms:-}"
  done
done
for side in base new; do
  # shellcheck disable=SC2086
  median=$(printf '%s\n' ${times[$side]} | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
  echo "RESULT ab side=$side runs=${times[$side]:- none} median_ms=${median:-none}"
done
