#!/usr/bin/env bash
# On the GPU machine: build, run one gtest filter, run `ft-bench ops` and `ft-bench adamw` with
# their PyTorch peers, then profile the fused kernels of the memory-bound ops and of the
# optimizer step with Nsight Compute (one condensed line per kernel launch, scripts/ncu_table.py).
# For finding where an op's time goes; scripts/device_check.sh is the full check.
#   scripts/device_profile.sh [gtest filter] [kernel-name regex]
# NCU_SECTIONS adds sections or metrics (e.g. "--metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
# shown as st:<reason> columns); NCU_LAUNCHES caps the launches
# profiled per program (12); NCU_OPS picks the programs profiled (residual dropout cross adamw).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
filter=${1:-'*CrossEntropy*:*LayerNorm*:*Dropout*'}
kernels=${2:-'norm_|sum_partials|map_kernel|map_reduce_columns|cross_entropy|multi_tensor|settle'}
BUILD_DIR=build-device scripts/build.sh >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"
build-device/tests/ft_tests --gtest_filter="$filter" >"$out/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED) " "$out/gtest.log"
grep -E "^\[  FAILED" "$out/gtest.log" | head -20

build-device/examples/ft-bench ops >"$out/bench-ops.log" 2>&1 || tail -20 "$out/bench-ops.log"
python3 bench/peers/ops_torch.py >"$out/bench-ops-torch.log" 2>&1 || tail -20 "$out/bench-ops-torch.log"
build-device/examples/ft-bench adamw >"$out/bench-adamw.log" 2>&1 || tail -20 "$out/bench-adamw.log"
python3 bench/peers/adamw_torch.py >"$out/bench-adamw-torch.log" 2>&1 || tail -20 "$out/bench-adamw-torch.log"

ncu_run() {  # label, then the program and its arguments
  local label=$1
  shift
  ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$kernels" --launch-count "${NCU_LAUNCHES:-12}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats ${NCU_SECTIONS:-} \
    --csv --page details "$@" >"$out/ncu-$label.csv" 2>"$out/ncu-$label.err"
  python3 scripts/ncu_table.py <"$out/ncu-$label.csv" >"$out/ncu-$label.txt"
}
for op in ${NCU_OPS:-residual dropout cross adamw}; do
  if [ "$op" = adamw ]; then ncu_run adamw build-device/examples/ft-bench adamw --iterations 1 --warmup 0
  else ncu_run "$op" build-device/examples/ft-bench ops --only "$op" --iterations 1 --warmup 0; fi
done

echo
sed -n '/^op (fwd+bwd)/,/^$/p' "$out/bench-ops.log"
grep '^RESULT' "$out/bench-ops-torch.log" "$out/bench-adamw-torch.log"
sed -n '/^variant/,/^fused vs twin/p' "$out/bench-adamw.log"
for f in "$out"/ncu-*.txt; do echo "== $f"; cut -c1-170 "$f" | head -40; done
# Only a few files come back from the device: the CSVs go into one tarball.
tar czf "$out/ncu-csv.tgz" -C "$out" $(cd "$out" && ls ncu-*.csv ncu-*.err) && rm -f "$out"/ncu-*.csv "$out"/ncu-*.err
