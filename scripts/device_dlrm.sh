#!/usr/bin/env bash
# On the GPU machine, the DLRM part of the device check: build with every core, the DLRM ops'
# tests (and the same under compute-sanitizer memcheck), `ft-bench dlrm` for the bench and mlperf
# presets with the PyTorch peer (eager and torch.compile) in the same run, and ft-dlrm fused
# and unfused on one synthetic Criteo file (the same AUC expected). Prints a short table last
# (also in $OUT/summary-dlrm.txt); logs go to $OUT/logs-dlrm.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
logs=$B/logs-dlrm
mkdir -p "$logs"
trap 'tar czf "$out/logs-dlrm.tgz" -C $B logs-dlrm' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
BUILD_DIR=$B scripts/build.sh >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"

filter='*EmbeddingBag*:*DotInteraction*:*Bce*:*SparseRows*:*Criteo*:*Module*'
$B/tests/ft_tests --gtest_filter="$filter" >"$logs/gtest.log" 2>&1
tests=$(grep -E '^\[  (PASSED|FAILED) ' "$logs/gtest.log" | tr '\n' ' ')
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/ft_tests \
  --gtest_filter='*EmbeddingBag*cuda*:*EmbeddingBagFused*:*DotInteraction*cuda*:*DotInteractionFused*:*Bce*cuda*:*BceFused*' \
  >"$logs/memcheck.log" 2>&1
memcheck=$([ $? -eq 0 ] && echo "clean" || echo "FINDINGS (see memcheck.log): $(grep -c 'Invalid\|uninitialized' "$logs/memcheck.log")")

timeout 150 $B/examples/ft-bench dlrm --preset bench >"$logs/bench.log" 2>&1 || tail -5 "$logs/bench.log"
timeout 150 $B/examples/ft-bench dlrm --preset mlperf --kernels fused --steps 10 >"$logs/mlperf.log" 2>&1 ||
  tail -5 "$logs/mlperf.log"
(cd bench/peers && timeout 200 python3 dlrm_torch.py --preset bench) >"$logs/torch-bench.log" 2>&1 ||
  tail -5 "$logs/torch-bench.log"
(cd bench/peers && timeout 150 python3 dlrm_torch.py --preset bench --dtype bf16 --modes eager) \
  >"$logs/torch-bench-bf16.log" 2>&1 || tail -5 "$logs/torch-bench-bf16.log"

syn=/tmp/ft-dlrm-syn.tsv
$B/examples/ft-dlrm --make-synthetic $syn --rows 2000000 --table-rows 100000 >"$logs/synthetic.log" 2>&1
for mode in fused unfused; do
  timeout 150 $B/examples/ft-dlrm --data $syn --preset bench --table-rows 100000 --kernels $mode --log-every 50 \
    >"$logs/train-$mode.log" 2>&1 || tail -5 "$logs/train-$mode.log"
done

{
echo
echo "== fusedtrain DLRM device check ($(date -u +%F), $(head -1 "$logs/gpu.txt" | cut -d, -f1)) =="
echo "tests: $tests"
echo "memcheck (DLRM ops' GPU tests): $memcheck"
echo
sed -n '/^kernels/,$p' "$logs/bench.log"
grep '^RESULT' "$logs/mlperf.log"
grep -E '^RESULT' "$logs/torch-bench.log" "$logs/torch-bench-bf16.log" | sed 's/^.*RESULT /peer: /'
ours=$(sed -n 's/^RESULT dlrm preset=bench kernels=fused graph=1 ms=\([0-9.]*\).*/\1/p' "$logs/bench.log")
peer=$(sed -n 's/^RESULT .*eager_ms=\([0-9.]*\).*/\1/p' "$logs/torch-bench.log")
[ -n "$ours" ] && [ -n "$peer" ] &&
  awk -v o="$ours" -v p="$peer" 'BEGIN { printf "dlrm-kaggle: torch eager %.3f ms, ours %.3f ms, torch / ours %.2fx\n", p, o, p / o }'
echo
grep 'wrote' "$logs/synthetic.log"
for mode in fused unfused; do grep '^RESULT' "$logs/train-$mode.log"; done
} | tee "$out/summary-dlrm.txt"
