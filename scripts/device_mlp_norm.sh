#!/usr/bin/env bash
# On the GPU machine: the MLP's LayerNorm + GELU + Dropout kernels. Builds with every core, runs
# the norm, GELU and MLP tests, times the mlp-fmnist step (`ft-bench mlp`, fused, graph) and
# residual + LayerNorm (`ft-bench ops`), then profiles the first launches of the norm kernels in
# ft-mlp with Nsight Compute (time, instructions, registers, occupancy, DRAM, stall reasons;
# scripts/ncu_table.py). For iterating on those kernels; every kernel of the step is
# `BREAKDOWN_BENCH=none scripts/device_breakdown.sh`, and scripts/device_check.sh is the full
# check.
#   scripts/device_mlp_norm.sh [gtest filter]
# Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
data=data/fashion-mnist
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
filter=${1:-'*Norm*:*Gelu*:*BiasAct*:*Elementwise*:*FusedGradView*'}
BUILD_DIR=$B scripts/build.sh >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"
$B/tests/ft_tests --gtest_filter="$filter" >"$out/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED) " "$out/gtest.log"
grep -E "^\[  FAILED" "$out/gtest.log" | head -20

for i in 1 2; do
  $B/examples/ft-bench mlp --kernels fused >"$out/bench-mlp-$i.log" 2>&1 || tail -5 "$out/bench-mlp-$i.log"
done
$B/examples/ft-bench ops --only layernorm >"$out/bench-ops.log" 2>&1 || tail -5 "$out/bench-ops.log"

stalls=""
for s in long_scoreboard short_scoreboard wait barrier mio_throttle lg_throttle math_pipe_throttle not_selected; do
  stalls+="smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio,"
done
# Launches 7-18: past the first step's (lazy loading, first-touch allocations).
ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:norm_|sum_partials" --launch-skip 6 \
  --launch-count 12 --section SpeedOfLight --section Occupancy --section LaunchStats --metrics "${stalls%,},smsp__inst_executed.sum" \
  --csv --page details $B/examples/ft-mlp --device cuda --graph 0 --epochs 1 --batch 4096 --log-every 5 --data-dir "$data" \
  >"$out/ncu-norm.csv" 2>"$out/ncu-norm.err" || tail -5 "$out/ncu-norm.err"
python3 scripts/ncu_table.py <"$out/ncu-norm.csv" >"$out/norm-kernels.txt"

echo
echo "== mlp norm ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) =="
grep -h '^RESULT' "$out"/bench-mlp-*.log
grep -iE "layernorm|layer_norm" "$out/bench-ops.log" | head -6
cut -c1-260 "$out/norm-kernels.txt"
