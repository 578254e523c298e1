#!/usr/bin/env bash
# N data-parallel processes with batch B train the same weights as one process with batch N·B:
# both runs write a checkpoint after their last step and ft-compare-checkpoints compares them
# (relative tolerance R). --check-replicas makes every rank verify, after each step, that all
# ranks hold bit-identical weights. $DP_ARGS are added to the N-process run only (--zero 1).
# The N-process run must leave its rendezvous folder empty.
#   dp_equivalence_check.sh WORK N B R COMPARE BINARY [ARGS...]
set -euo pipefail
work=$1 n=$2 b=$3 rtol=$4 compare=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$@" --batch $((n * b)) --ckpt-dir "$work/one" >"$work/one.log" 2>&1 || { cat "$work/one.log"; exit 1; }
FT_STORE_DIR="$work/rendezvous" FT_LAUNCH_GRACE=10 "$here/../../../scripts/launch.sh" "$n" "$@" --batch "$b" \
  --ckpt-dir "$work/many" --check-replicas 1 ${DP_ARGS:-} >"$work/many.log" 2>&1 || { cat "$work/many.log"; exit 1; }
grep -h "data parallel over\|tables sharded" "$work/many.log"
"$compare" "$work/one" "$work/many" --rtol "$rtol"
# A run that ended cleanly leaves no rendezvous files behind (its run folder is gone).
if [ -d "$work/rendezvous" ] && [ -n "$(ls -A "$work/rendezvous")" ]; then
  echo "rendezvous files left behind:"; find "$work/rendezvous" | head -20; exit 1
fi
