#!/usr/bin/env bash
# Resuming a data-parallel run, on the same world size and on another one. With the global
# batch kept (N ranks x B = M ranks x B·N/M), the data position means the same batches:
#   1. N ranks train S steps straight;
#   2. N ranks train S/2 steps, then N ranks resume to S: the same weights bit for bit;
#   3. N ranks train S/2 steps, then M ranks (batch B·N/M) resume to S: the weights one process
#      with batch N·B trains, within R (another summation order).
#   dp_resume_check.sh WORK N M B S R COMPARE BINARY [ARGS...]   ($DP_ARGS: added to every run)
set -euo pipefail
work=$1 n=$2 m=$3 b=$4 steps=$5 rtol=$6 compare=$7
shift 7
here=$(cd "$(dirname "$0")" && pwd)
launch="$here/../../../scripts/launch.sh"
rm -rf "$work" && mkdir -p "$work"
export FT_STORE_DIR="$work/rendezvous" FT_LAUNCH_GRACE=10
run() {  # run LOG COMMAND...: keeps the log, prints it when the command fails
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
}
half=$((steps / 2))
run "$work/one.log" "$@" --batch $((n * b)) --steps "$steps" --ckpt-dir "$work/one"
run "$work/straight.log" "$launch" "$n" "$@" --batch "$b" --steps "$steps" --ckpt-dir "$work/straight" ${DP_ARGS:-}
run "$work/first.log" "$launch" "$n" "$@" --batch "$b" --steps "$half" --ckpt-dir "$work/same" ${DP_ARGS:-}
cp -r "$work/same" "$work/other"
run "$work/same.log" "$launch" "$n" "$@" --batch "$b" --steps "$steps" --ckpt-dir "$work/same" --resume "$work/same" \
  ${DP_ARGS:-}
run "$work/other.log" "$launch" "$m" "$@" --batch $((b * n / m)) --steps "$steps" --ckpt-dir "$work/other" \
  --resume "$work/other" ${DP_ARGS:-}
grep -h "resumed from step\|data parallel over" "$work/same.log" "$work/other.log"
echo "same world size ($n), resumed at step $half:"
"$compare" "$work/straight" "$work/same" --rtol 0
echo "world size $n resumed on $m:"
"$compare" "$work/one" "$work/other" --rtol "$rtol"
