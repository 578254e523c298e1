#!/usr/bin/env bash
# On the GPU machine, the attention work of issue 21 in one call: build with every core, the
# GPU test suite, compute-sanitizer (memcheck, racecheck, synccheck) over the attention tests
# with only the project's kernels instrumented, then the attention table (fused on the default
# forward, fused on the mma.sync forward, the twin) beside PyTorch's SDPA, and ft-bench gpt2
# with graphs unless SKIP_GPT2=1. Prints a short table last (also in $OUT/summary-attention.txt);
# logs go to $OUT/logs-attention.tgz.
#
#   SKIP_TESTS=1      no test suite and no sanitizer (a benchmark-only call)
#   SKIP_SANITIZER=1  the test suite but no sanitizer
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
logs=$B/logs-attention
mkdir -p "$logs"
trap 'tar czf "$out/logs-attention.tgz" -C $B logs-attention' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
BUILD_DIR=$B scripts/build.sh >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"

gtest_summary="not run"
sanitizer_summary="not run"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  $B/tests/ft_tests --gtest_filter='-*/cpu_*:OutOfMemoryTest.CapturedGraph*' >"$logs/gtest.log" 2>&1 &&
    $B/tests/ft_tests --gtest_filter='OutOfMemoryTest.CapturedGraph*' >>"$logs/gtest.log" 2>&1
  [ $? -eq 0 ] || grep -E "^\[  FAILED|Failure|error" "$logs/gtest.log" | head -30
  gtest_summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$logs/gtest.log" | tr '\n' ' ')
  echo "gtest: $gtest_summary"
  if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
    OUT=$logs SKIP_BUILD=1 TOOLS="memcheck racecheck synccheck" SHARDS=2 SAN_BUDGET_S=100 PROJECT_KERNELS_ONLY=1 \
      FILTER='AttentionFusedTest.*:-AttentionFusedTest.BackwardIsBitReproducibleAcrossWaves' LOG_NAME=sanitize-attention \
      timeout 330 scripts/device_sanitize.sh >"$logs/sanitize.log" 2>&1
    sanitizer_summary="rc $? (table in sanitize.log)"
  fi
fi

timeout 120 $B/examples/ft-bench ops --only attention --warmup 10 --iterations 30 >"$logs/attention.log" 2>&1 ||
  tail -5 "$logs/attention.log"
timeout 90 python3 bench/peers/ops_torch.py --only attention --warmup 10 --iterations 30 >"$logs/attention-torch.log" 2>&1 ||
  tail -5 "$logs/attention-torch.log"
if [ "${SKIP_GPT2:-0}" != 1 ]; then
  timeout 240 $B/examples/ft-bench gpt2 --graph 1 >"$logs/gpt2.log" 2>&1 || tail -5 "$logs/gpt2.log"
fi

{
echo
echo "== fusedtrain attention check ($(date -u +%F), $(head -1 "$logs/gpu.txt" | cut -d, -f1)) =="
echo "gtest: $gtest_summary"
echo "sanitizer: $sanitizer_summary"
[ -f "$logs/sanitize.log" ] && tail -20 "$logs/sanitize.log"
echo
grep -E '^causal attention|^B[0-9]+ NH|^ +(mma.sync|twin|batched)' "$logs/attention.log"
grep '^RESULT attention=' "$logs/attention-torch.log" | sed 's/^RESULT /torch: /'
echo
[ -f "$logs/gpt2.log" ] && sed -n '/^kernels/,$p' "$logs/gpt2.log" | grep -v '^RESULT'
} | tee "$out/summary-attention.txt"
