#!/usr/bin/env bash
# On the GPU machine: issue 21's gap, kernel by kernel, in one call. Builds with every core,
# then, all in this one run:
#   - ft-bench gpt2 (fused, graph) three times: ms, tok/s, peak memory;
#   - ft-bench ops (one call a replay, and 10 in one graph) and the attention table, beside
#     PyTorch (eager ops, SDPA);
#   - Nsight Compute over one eager gpt2 step, the attention bench's kernels (HS 64 and HS 128,
#     told apart by their grids), and the fused kernels of residual+LayerNorm and
#     bias+dropout+residual: time, DRAM bandwidth and the share of cycles SMs were busy, per
#     kernel (scripts/ncu_breakdown.py; kernels alone, serialized by ncu).
# No test suite: scripts/device_check.sh and scripts/device_gpt2.sh are the checks. Prints a
# short table last (also in $OUT/summary-gap.txt); logs go to $OUT/logs-gap.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
logs=$B/logs-gap
mkdir -p "$logs"
trap 'tar czf "$out/logs-gap.tgz" -C $B logs-gap' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
BUILD_DIR=$B scripts/build.sh >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"

for run in 1 2 3; do
  timeout 120 $B/examples/ft-bench gpt2 --kernels fused --graph 1 >"$logs/gpt2-$run.log" 2>&1 || tail -5 "$logs/gpt2-$run.log"
done
timeout 180 $B/examples/ft-bench ops >"$logs/ops.log" 2>&1 || tail -5 "$logs/ops.log"
timeout 120 python3 bench/peers/ops_torch.py >"$logs/ops-torch.log" 2>&1 || tail -5 "$logs/ops-torch.log"

metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size
metrics+=,launch__registers_per_thread,sm__cycles_active.avg,sm__cycles_elapsed.avg
ncu_groups() {  # label, then ncu's arguments and the program
  local label=$1
  shift
  timeout 200 ncu --clock-control none --cache-control none --kernel-name-base demangled --metrics "$metrics" \
    --csv --page raw "$@" >"$logs/ncu-$label.csv" 2>"$logs/ncu-$label.err" || tail -5 "$logs/ncu-$label.err"
  python3 scripts/ncu_breakdown.py --top 45 <"$logs/ncu-$label.csv" >"$logs/breakdown-$label.txt"
}
one_op=(--warmup 0 --iterations 1 --batched 1)
ncu_groups gpt2 --profile-from-start off $B/examples/ft-bench gpt2 --kernels fused --graph 0 --warmup 1 --steps 1
ncu_groups attention --kernel-name regex:attention --launch-count 40 $B/examples/ft-bench ops --only attention "${one_op[@]}"
ncu_groups residual --kernel-name 'regex:norm_|sum_partials|partial_row' --launch-count 12 \
  $B/examples/ft-bench ops --only residual "${one_op[@]}"
ncu_groups dropout --kernel-name 'regex:Dropout|philox_take' --launch-count 12 \
  $B/examples/ft-bench ops --only bias+dropout "${one_op[@]}"

{
echo
echo "== issue 21 gap ($(date -u +%F), $(head -1 "$logs/gpu.txt" | cut -d, -f1)) =="
grep -h '^RESULT gpt2' "$logs"/gpt2-*.log
echo
sed -n '/^op (fwd+bwd)/,/^bytes counted/p' "$logs/ops.log" | grep -v '^bytes counted'
grep -E '^causal attention|^B[0-9]+ NH|^ +(mma.sync|twin|batched)' "$logs/ops.log"
grep '^RESULT' "$logs/ops-torch.log" | sed 's/^RESULT /torch: /'
for f in gpt2 attention residual dropout; do
  echo "-- ncu: $f"
  cut -c1-200 "$logs/breakdown-$f.txt" | head -${ROWS:-32}
done
} | tee "$out/summary-gap.txt"
