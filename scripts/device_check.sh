#!/usr/bin/env bash
# On the GPU machine: build with every core, train ft-mlp for one epoch of the mlp-fmnist
# workload (batch 4096; the whole step replayed from a CUDA graph, the default) in both kernel
# modes with its PyTorch peer, run the benchmarks with their PyTorch peers, run
# the gtest suite on the GPU, and print a short table last (also kept in $OUT/summary.txt, so a
# call cut short still returns what was measured). Logs go to $OUT (or ./out). Fashion-MNIST is
# read from data/fashion-mnist when present (carried there), else from the system folder.
#
# The suite runs as one ft_tests process: ctest's one process per test, several at once, each
# with an OpenMP team over every core, made the CPU cases crawl here. The CPU end-to-end
# trainings (ctest's *_cpu_* and checkpoint tests) are CI's job and are not run here.
# The GPT-2 checks (parity with PyTorch, resume, attention and gpt2 benchmarks) are in
# scripts/device_gpt2.sh: both halves together exceed one 10-minute device call.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
# Only a few files come back from the device: the logs go to one tarball, written on any exit.
logs=build-device/logs
mkdir -p "$logs"
trap 'tar czf "$out/logs.tgz" -C build-device logs' EXIT
data=data/fashion-mnist
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"

BUILD_DIR=build-device scripts/build.sh -DFT_MLP_DATA_DIR="$PWD/$data" >"$logs/build.log" 2>&1 || {
  tail -40 "$logs/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"

# GPU cases and the fast CPU ones; the CPU instantiations of the device tests (*/cpu_*) are
# CI's, as are the CPU end-to-end ctests.
build-device/tests/ft_tests --gtest_filter='-*/cpu_*:OutOfMemoryTest.CapturedGraph*' >"$logs/gtest.log" 2>&1 &&
  build-device/tests/ft_tests --gtest_filter='OutOfMemoryTest.CapturedGraph*' >>"$logs/gtest.log" 2>&1
test_rc=$?
gtest_summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$logs/gtest.log" | tr '\n' ' ')
[ $test_rc -eq 0 ] || grep -E "^\[  FAILED" "$logs/gtest.log" | head -40
echo "gtest: $gtest_summary"


declare -A ms wall acc
for mode in unfused fused; do
  build-device/examples/ft-mlp --device cuda --kernels "$mode" --epochs 1 --batch 4096 --log-every 5 \
    --data-dir "$data" --metrics "$logs/mlp-$mode.jsonl" >"$logs/mlp-$mode.log" 2>&1
  line=$(grep '^RESULT' "$logs/mlp-$mode.log")
  [ -n "$line" ] || { tail -5 "$logs/mlp-$mode.log"; }
  ms[$mode]=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<<"$line")
  wall[$mode]=$(sed -n 's/.*wall_ms=\([0-9.]*\).*/\1/p' <<<"$line")
  acc[$mode]=$(sed -n 's/.*test_accuracy=\([0-9.]*\).*/\1/p' <<<"$line")
done

python3 bench/peers/mlp_torch.py >"$logs/mlp-torch.log" 2>&1 || tail -20 "$logs/mlp-torch.log"
build-device/examples/ft-bench ops >"$logs/bench-ops.log" 2>&1 || tail -20 "$logs/bench-ops.log"
python3 bench/peers/ops_torch.py >"$logs/bench-ops-torch.log" 2>&1 || tail -20 "$logs/bench-ops-torch.log"
build-device/examples/ft-bench adamw >"$logs/bench-adamw.log" 2>&1 || tail -20 "$logs/bench-adamw.log"
python3 bench/peers/adamw_torch.py >"$logs/bench-adamw-torch.log" 2>&1 || tail -20 "$logs/bench-adamw-torch.log"

{

echo
echo "== fusedtrain device check ($(date -u +%F), $(head -1 "$logs/gpu.txt" | cut -d, -f1)) =="
echo "gtest: $gtest_summary"
printf "%-22s %-12s %-12s %-14s\n" "ft-mlp (batch 4096)" "gpu ms/step" "wall ms" "test accuracy"
for mode in unfused fused; do
  printf "%-22s %-12s %-12s %-14s\n" "  $mode" "${ms[$mode]:-?}" "${wall[$mode]:-?}" "${acc[$mode]:-?}"
done
if [ -n "${ms[fused]:-}" ] && [ -n "${ms[unfused]:-}" ]; then
  awk -v f="${ms[fused]}" -v u="${ms[unfused]}" 'BEGIN { printf "  fused speed-up: %.2fx\n", u / f }'
fi
torch_graph=$(sed -n 's/.*torch_graph_ms=\([0-9.]*\).*/\1/p' "$logs/mlp-torch.log")
torch_eager=$(sed -n 's/.*torch_eager_ms=\([0-9.]*\).*/\1/p' "$logs/mlp-torch.log")
[ -n "${ms[fused]:-}" ] && [ -n "$torch_graph" ] &&
  awk -v f="${ms[fused]}" -v g="$torch_graph" -v e="$torch_eager" \
    'BEGIN { printf "  PyTorch whole-step graph %.3f ms (%.2fx ours), eager %.3f ms (%.2fx ours)\n", g, g / f, e, e / f }'
echo
sed -n '/^op (fwd+bwd)/,/^$/p' "$logs/bench-ops.log"
printf "%-24s %12s %12s %14s\n" "op vs PyTorch eager" "torch ms" "fused ms" "torch / fused"
grep '^RESULT op=' "$logs/bench-ops-torch.log" | while read -r line; do
  name=$(sed -n 's/^RESULT op=\(.*\) torch_eager_ms=.*/\1/p' <<<"$line")
  torch_ms=$(sed -n 's/.*torch_eager_ms=\([0-9.]*\).*/\1/p' <<<"$line")
  ours=$(grep "^RESULT op=$name fused_ms=" "$logs/bench-ops.log" | sed -n 's/.* fused_eager_ms=\([0-9.]*\).*/\1/p')
  [ -n "$ours" ] && awk -v n="$name" -v t="$torch_ms" -v f="$ours" 'BEGIN { printf "%-24s %12.3f %12.3f %13.2fx\n", n, t, f, t / f }'
done
echo "(fused ms here is eager, launch gaps included, to match PyTorch eager)"
echo
sed -n '/^variant/,/^fused vs twin/p' "$logs/bench-adamw.log"
ours=$(sed -n 's/^RESULT op=adamw-gpt2 graph_ms=\([0-9.]*\).*/\1/p' "$logs/bench-adamw.log")
torch_ms=$(sed -n 's/.*torch_fused_ms=\([0-9.]*\).*/\1/p' "$logs/bench-adamw-torch.log")
[ -n "$ours" ] && [ -n "$torch_ms" ] &&
  awk -v t="$torch_ms" -v f="$ours" 'BEGIN { printf "adamw-gpt2: torch fused %.3f ms, ours %.3f ms, torch / ours %.2fx\n", t, f, t / f }'
} | tee "$out/summary.txt"
exit $test_rc
