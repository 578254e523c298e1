#!/usr/bin/env bash
# On the GPU machine: does ft-dlrm reach the same AUC fused and unfused? Trains the bench model on
# one synthetic Criteo file for several seeds in both modes, so that the fused-unfused gap can be
# read against the seed-to-seed spread. Prints a table last (also $OUT/summary-dlrm-auc.txt).
#   scripts/device_dlrm_auc.sh [ft-dlrm flags for every run...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
B=build-device
logs=$B/logs-dlrm-auc
mkdir -p "$logs"
trap 'tar czf "$out/logs-dlrm-auc.tgz" -C $B logs-dlrm-auc' EXIT
[ -x $B/examples/ft-dlrm ] || BUILD_DIR=$B scripts/build.sh >"$logs/build.log" 2>&1 ||
  { tail -40 "$logs/build.log"; echo "BUILD FAILED"; exit 1; }
syn=/tmp/ft-dlrm-syn.tsv
[ -f $syn ] || $B/examples/ft-dlrm --make-synthetic $syn --rows 2000000 --table-rows 100000 >"$logs/synthetic.log" 2>&1
for seed in 0 1 2; do
  for mode in fused unfused; do
    timeout 120 $B/examples/ft-dlrm --data $syn --preset bench --table-rows 100000 --kernels $mode --seed $seed \
      --log-every 1000 "$@" >"$logs/train-$mode-$seed.log" 2>&1 || tail -5 "$logs/train-$mode-$seed.log"
  done
done
{
echo "== ft-dlrm fused vs unfused AUC ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader)), flags: --preset bench $*"
grep -h 'true model' "$logs"/train-fused-0.log
printf '%-5s %-9s %-9s %-9s\n' seed fused unfused gap
for seed in 0 1 2; do
  f=$(sed -n 's/^RESULT.* test_auc=\([0-9.]*\).*/\1/p' "$logs/train-fused-$seed.log")
  u=$(sed -n 's/^RESULT.* test_auc=\([0-9.]*\).*/\1/p' "$logs/train-unfused-$seed.log")
  awk -v s=$seed -v f="$f" -v u="$u" 'BEGIN { printf "%-5s %-9s %-9s %+.5f\n", s, f, u, f - u }'
done
} | tee "$out/summary-dlrm-auc.txt"
