# One gtest filter, run `ft-bench ops` and `ft-bench adamw` with
# their PyTorch peers, then profile the fused kernels of the memory-bound ops and of the
# optimizer step with Nsight Compute (one condensed line per kernel launch, scripts/ncu_table.py).
# For finding where an op's time goes.
#   FILTER=<gtest filter> KERNELS=<kernel-name regex> scripts/device/run.sh profile
# NCU_SECTIONS adds sections or metrics (e.g. "--metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
# shown as st:<reason> columns); NCU_LAUNCHES caps the launches
# profiled per program (12); NCU_OPS picks the programs profiled (residual dropout cross adamw).
filter=${FILTER:-'*CrossEntropy*:*LayerNorm*:*Dropout*'}
kernels=${KERNELS:-'norm_|sum_partials|map_kernel|map_reduce_columns|cross_entropy|multi_tensor|settle'}
$B/tests/ft_tests --gtest_filter="$filter" >"$logs/gtest.log" 2>&1
grep -E "^\[  (PASSED|FAILED) " "$logs/gtest.log"
grep -E "^\[  FAILED" "$logs/gtest.log" | head -20

$B/bench/ft-bench ops >"$logs/bench-ops.log" 2>&1 || tail -20 "$logs/bench-ops.log"
python3 bench/peers/ops_torch.py >"$logs/bench-ops-torch.log" 2>&1 || tail -20 "$logs/bench-ops-torch.log"
$B/bench/ft-bench adamw >"$logs/bench-adamw.log" 2>&1 || tail -20 "$logs/bench-adamw.log"
python3 bench/peers/adamw_torch.py >"$logs/bench-adamw-torch.log" 2>&1 || tail -20 "$logs/bench-adamw-torch.log"

ncu_run() {  # label, then the program and its arguments
  local label=$1
  shift
  ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$kernels" --launch-count "${NCU_LAUNCHES:-12}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats ${NCU_SECTIONS:-} \
    --csv --page details "$@" >"$logs/ncu-$label.csv" 2>"$logs/ncu-$label.err"
  python3 scripts/ncu_table.py <"$logs/ncu-$label.csv" >"$logs/ncu-$label.txt"
}
for op in ${NCU_OPS:-residual dropout cross adamw}; do
  if [ "$op" = adamw ]; then ncu_run adamw $B/bench/ft-bench adamw --iterations 1 --warmup 0
  else ncu_run "$op" $B/bench/ft-bench ops --only "$op" --iterations 1 --warmup 0; fi
done

echo
sed -n '/^op (fwd+bwd)/,/^$/p' "$logs/bench-ops.log"
grep '^RESULT' "$logs/bench-ops-torch.log" "$logs/bench-adamw-torch.log"
sed -n '/^variant/,/^fused vs twin/p' "$logs/bench-adamw.log"
for f in "$logs"/ncu-*.txt; do echo "== $f"; cut -c1-170 "$f" | head -40; done
# Only a few files come back from the device: the CSVs go into one tarball.
tar czf "$logs/ncu-csv.tgz" -C "$logs" $(cd "$logs" && ls ncu-*.csv ncu-*.err) && rm -f "$logs"/ncu-*.csv "$logs"/ncu-*.err
