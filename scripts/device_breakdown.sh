#!/usr/bin/env bash
# On the GPU machine: where the time of a gpt2-124M step and of an mlp-fmnist step goes, kernel
# by kernel. Builds with every core, runs one gtest filter, times `ft-bench gpt2` (fused, with
# and without the graph) and one ft-mlp epoch (fused, graph), then profiles one eager fused GPT-2 step and the first eager ft-mlp
# steps with Nsight Compute (duration, DRAM bytes, launch shape and SMs' busy share per kernel; caches not flushed
# between kernels, as in a real step) and prints scripts/ncu_breakdown.py's table for each.
#   scripts/device_breakdown.sh [gtest filter]
# BREAKDOWN_BENCH=lora profiles `ft-bench lora` (the lora-gpt2 step) instead of `ft-bench gpt2`;
# BREAKDOWN_BENCH=none leaves the GPT-2 side out (the mlp-fmnist table alone).
# BREAKDOWN_STALLS=regex also profiles the first launches of the matching kernels in ft-mlp with
# the warp stall reasons (scripts/ncu_table.py). Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
data=data/fashion-mnist
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
filter=${1:-'*Graph*:*Attention*:*LayerNorm*:*Dropout*'}
bench=${BREAKDOWN_BENCH:-gpt2}
BUILD_DIR=$B scripts/build.sh >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"
$B/tests/ft_tests --gtest_filter="$filter" >"$out/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED) " "$out/gtest.log"
grep -E "^\[  FAILED" "$out/gtest.log" | head -20

if [ "$bench" != none ]; then
  timeout 120 $B/examples/ft-bench $bench --kernels fused --graph 1 >"$out/$bench-graph.log" 2>&1 || tail -5 "$out/$bench-graph.log"
  timeout 120 $B/examples/ft-bench $bench --kernels fused --graph 0 >"$out/$bench-eager.log" 2>&1 || tail -5 "$out/$bench-eager.log"
fi

timeout 120 $B/examples/ft-mlp --device cuda --epochs 1 --batch 4096 --log-every 5 --data-dir "$data" \
  >"$out/mlp.log" 2>&1 || tail -5 "$out/mlp.log"

metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__cycles_active.avg,sm__cycles_elapsed.avg
ncu_breakdown() {  # label, steps covered, then the program and its arguments
  local label=$1 steps=$2
  shift 2
  timeout 300 ncu --clock-control none --cache-control none --kernel-name-base demangled --metrics "$metrics" \
    --csv --page raw "$@" >"$out/ncu-$label.csv" 2>"$out/ncu-$label.err" || tail -5 "$out/ncu-$label.err"
  python3 scripts/ncu_breakdown.py --steps "$steps" <"$out/ncu-$label.csv" >"$out/breakdown-$label.txt"
}
# Only the timed step: ft-bench brackets its timed steps with cudaProfilerStart/Stop.
[ "$bench" = none ] || ncu_breakdown $bench 1 --profile-from-start off $B/examples/ft-bench $bench --kernels fused --graph 0 --warmup 1 --steps 1
# ft-mlp has no marks: four steps after the first two, found by launch count.
mlp_args=(--device cuda --graph 0 --epochs 1 --batch 4096 --log-every 5 --data-dir "$data")
ncu --clock-control none --launch-count 400 --metrics gpu__time_duration.sum --csv --page raw $B/examples/ft-mlp "${mlp_args[@]}" \
  >"$out/ncu-mlp-count.csv" 2>/dev/null
per_step=$(python3 - "$out/ncu-mlp-count.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')) if r["ID"].strip().isdigit()]
names = [r["Kernel Name"] for r in rows]
# The fused AdamW settles each step once (settle_kernel): from one settle to the next is one
# step's launches (its update, then the next step's forward, backward and norm).
starts = [i + 1 for i, n in enumerate(names) if "settle_kernel" in n]
print(f"{starts[2]} {starts[6] - starts[2]}" if len(starts) > 6 else "0 0")
EOF
)
read -r skip count <<<"$per_step"
if [ "${count:-0}" -gt 0 ]; then
  ncu_breakdown mlp 4 --launch-skip "$skip" --launch-count "$count" $B/examples/ft-mlp "${mlp_args[@]}"
fi
if [ -n "${BREAKDOWN_STALLS:-}" ]; then
  stalls=""
  for s in long_scoreboard short_scoreboard wait barrier mio_throttle lg_throttle math_pipe_throttle not_selected; do
    stalls+="smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio,"
  done
  ncu --clock-control none --cache-control none --kernel-name-base demangled --kernel-name "regex:$BREAKDOWN_STALLS" \
    --launch-skip 0 --launch-count 8 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --metrics "${stalls%,},smsp__inst_executed.sum" --csv --page details $B/examples/ft-mlp "${mlp_args[@]}" \
    >"$out/ncu-stalls.csv" 2>"$out/ncu-stalls.err"
  python3 scripts/ncu_table.py <"$out/ncu-stalls.csv" >"$out/stalls.txt"
fi

echo
echo "== breakdown ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) =="
grep -h '^RESULT' "$out/$bench-graph.log" "$out/$bench-eager.log" "$out/mlp.log" 2>/dev/null
for f in $bench mlp; do
  [ -f "$out/breakdown-$f.txt" ] && { echo "-- $f"; cut -c1-190 "$out/breakdown-$f.txt"; }
done
[ -f "$out/stalls.txt" ] && { echo "-- stalls"; cut -c1-230 "$out/stalls.txt"; }
tar czf "$out/ncu-csv.tgz" -C "$out" $(cd "$out" && ls ncu-*.csv ncu-*.err 2>/dev/null) && rm -f "$out"/ncu-*.csv "$out"/ncu-*.err
