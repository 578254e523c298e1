# Unfused mode against eager PyTorch, every peer in the same call: the GPU gtest suite (GTEST=filter, default every GPU case;
# SKIP_TESTS=1 skips it); then ft-bench ops (each op's twin, attention included) against
# ops_torch.py, ft-bench gpt2 in both modes against gpt2_torch.py eager with naive attention
# (the twin's op sequence) and foreach AdamW, ft-bench mlp (graph and eager) against mlp_torch.py, and
# ft-bench adamw against adamw_torch.py (for-loop, foreach, fused), each peer's JSON given to
# ft-bench (--peers) so it prints the two side by side and writes its own (--json); ft-mlp's loss
# curves in both modes (--metrics) for scripts/plot.py. BREAKDOWN=1 also profiles
# one unfused gpt2 step kernel by kernel with Nsight Compute (BREAKDOWN_LAYERS blocks, 2 by
# default: every block runs the same kernels). Logs, JSON and JSONL go to $OUT/logs.tgz;
# a short table goes into the summary.

test_rc=0
gtest_summary="not run"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # The graph out-of-memory case leaves the device full for its process: it runs alone.
  $B/tests/ft_tests --gtest_filter="${GTEST:--*/cpu_*:OutOfMemoryTest.CapturedGraph*}" >"$logs/gtest.log" 2>&1 &&
    $B/tests/ft_tests --gtest_filter='OutOfMemoryTest.CapturedGraph*' >>"$logs/gtest.log" 2>&1
  test_rc=$?
  gtest_summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$logs/gtest.log" | tr '\n' ' ')
  [ $test_rc -eq 0 ] || grep -E "^\[  FAILED" "$logs/gtest.log" | head -40
  echo "gtest: $gtest_summary"
fi

# Each PyTorch peer runs first and writes its JSON; ft-bench reads it (--peers), prints its own
# times beside the peer's, and writes them (--json) for scripts/plot.py.
peers=bench/peers
peer_flag() { [ -s "$1" ] && echo "--peers $1"; }
# The small ops' peer times vary between calls with 3 warm-ups (docs/history/performance-log.md): 20 and 50.
timeout 150 python3 $peers/ops_torch.py --warmup 20 --iterations 50 --json "$logs/ops-torch.json" >"$logs/ops-torch.log" 2>&1 || tail -5 "$logs/ops-torch.log"
timeout 240 $B/bench/ft-bench ops --warmup 20 --iterations 50 $(peer_flag "$logs/ops-torch.json") --json "$logs/ops.json" \
  >"$logs/ops.log" 2>&1 || tail -5 "$logs/ops.log"
(cd $peers && timeout 120 python3 gpt2_torch.py --mode eager --attention naive --optimizer foreach --steps 5 \
  --json "../../$logs/gpt2-torch.json") >"$logs/gpt2-torch.log" 2>&1 || tail -5 "$logs/gpt2-torch.log"
for graph in 0 1; do
  timeout 150 $B/bench/ft-bench gpt2 --graph $graph --steps 5 --warmup 2 $(peer_flag "$logs/gpt2-torch.json") \
    --json "$logs/gpt2-graph$graph.json" >"$logs/gpt2-graph$graph.log" 2>&1 || tail -5 "$logs/gpt2-graph$graph.log"
done
timeout 120 python3 $peers/mlp_torch.py --json "$logs/mlp-torch.json" >"$logs/mlp-torch.log" 2>&1 || tail -5 "$logs/mlp-torch.log"
for graph in 1 0; do
  timeout 120 $B/bench/ft-bench mlp --graph $graph $(peer_flag "$logs/mlp-torch.json") --json "$logs/mlp-graph$graph.json" \
    >"$logs/mlp-graph$graph.log" 2>&1 || tail -5 "$logs/mlp-graph$graph.log"
done
# ft-mlp itself: the wall clock a user sees at the benchmark's batch, and loss curves to draw
# (two epochs at batch 256, the default, a metrics line every 10 steps).
for mode in unfused fused; do
  timeout 120 $B/examples/ft-mlp --device cuda --kernels $mode --epochs 1 --batch 4096 --log-every 5 \
    --data-dir "$data" >"$logs/mlp-$mode.log" 2>&1 || tail -5 "$logs/mlp-$mode.log"
  timeout 120 $B/examples/ft-mlp --device cuda --kernels $mode --epochs 2 --log-every 10 \
    --metrics "$logs/mlp-loss-$mode.jsonl" --data-dir "$data" >"$logs/mlp-loss-$mode.log" 2>&1 || tail -5 "$logs/mlp-loss-$mode.log"
done
timeout 120 python3 $peers/adamw_torch.py --json "$logs/adamw-torch.json" >"$logs/adamw-torch.log" 2>&1 || tail -5 "$logs/adamw-torch.log"
timeout 120 $B/bench/ft-bench adamw $(peer_flag "$logs/adamw-torch.json") --json "$logs/adamw.json" \
  >"$logs/adamw.log" 2>&1 || tail -5 "$logs/adamw.log"

if [ "${BREAKDOWN:-0}" = 1 ]; then
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
  timeout 300 ncu --clock-control none --cache-control none --kernel-name-base demangled --metrics "$metrics" \
    --csv --page raw --profile-from-start off $B/bench/ft-bench gpt2 --kernels unfused --graph 0 --warmup 1 --steps 1 \
    --layers "${BREAKDOWN_LAYERS:-2}" >"$logs/ncu-unfused.csv" 2>"$logs/ncu-unfused.err" || tail -5 "$logs/ncu-unfused.err"
  python3 scripts/ncu_breakdown.py --top 30 <"$logs/ncu-unfused.csv" >"$logs/breakdown-unfused.txt"
fi

{
echo
echo "== unfused vs eager PyTorch ($(date -u +%F), $(head -1 "$logs/gpu.txt" | cut -d, -f1)) =="
echo "gtest: $gtest_summary"
sed -n '/^op (fwd+bwd)/,/^$/p' "$logs/ops.log"
for log in ops gpt2-graph0 gpt2-graph1 mlp-graph1 mlp-graph0 adamw; do
  echo "-- ft-bench $log"
  grep -h 'did not run' "$logs/$log.log"
  sed -n '/^side by side/,/^(unfused\/PyTorch/p' "$logs/$log.log" | grep -v '^(unfused/PyTorch'
done
grep -h '^RESULT' "$logs"/mlp-unfused.log "$logs"/mlp-fused.log
sed -n '/^variant/,/^fused vs twin/p' "$logs/adamw.log"
[ -f "$logs/breakdown-unfused.txt" ] && head -36 "$logs/breakdown-unfused.txt"
} | tee -a "$summary"
exit $test_rc
