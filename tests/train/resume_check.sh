#!/usr/bin/env bash
# Resuming reproduces the uninterrupted run exactly: a binary (ft-gpt2, ft-dlrm) trains 30 steps with a checkpoint
# at step 20, then a second run resumes from that checkpoint; the losses of steps 21-30 (printed
# to 9 significant digits in the metrics) must be identical.
#   resume_check.sh <binary> <work folder> [its arguments...]
set -euo pipefail
binary=$1 work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
"$binary" "$@" --steps 30 --log-every 1 --ckpt-dir "$work/ckpt" --ckpt-every 20 --metrics "$work/whole.jsonl" \
  >"$work/whole.log"
"$binary" "$@" --steps 30 --log-every 1 --resume "$work/ckpt/step_00000020" --metrics "$work/resumed.jsonl" \
  >"$work/resumed.log"
losses() { sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/p' "$1" | awk '$1 > 20'; }
whole=$(losses "$work/whole.jsonl")
resumed=$(losses "$work/resumed.jsonl")
if [ -z "$resumed" ] || [ "$(wc -l <<<"$resumed")" -ne 10 ]; then
  echo "error: the resumed run logged no steps 21-30"; cat "$work/resumed.log"; exit 1
fi
if [ "$whole" != "$resumed" ]; then
  echo "error: resumed losses differ from the uninterrupted run"
  paste <(echo "$whole") <(echo "$resumed")
  exit 1
fi
echo "resume reproduces steps 21-30 exactly:"
echo "$resumed"
