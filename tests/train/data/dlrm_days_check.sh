#!/usr/bin/env bash
# ft-dlrm on Criteo 1TB's layout: --make-synthetic --days writes day files of the criteo1tb
# preset's tables (capped by --max-ind-range), a run trains on 'day_*' (the last day held out and
# halved into test and validation), and --eval-only on its checkpoint reports the very test AUC
# the run did. A second run finds every file's cache; --test/--val take held-out files apart.
#   dlrm_days_check.sh WORK FT_DLRM
set -euo pipefail
work=$1 dlrm=$2
rm -rf "$work" && mkdir -p "$work"
model=(--preset criteo1tb --max-ind-range 20000 --dim 8 --bottom 16-8 --top 16-1 --batch 256 --log-every 50)
"$dlrm" --make-synthetic "$work/days" --days 3 --rows 12000 "${model[@]}" >"$work/make.log"
grep -c wrote "$work/make.log" | grep -qx 3 || { cat "$work/make.log"; exit 1; }
"$dlrm" --data "$work/days/day_*" "${model[@]}" --ckpt-dir "$work/ckpt" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; exit 1; }
grep -q "day_0 ... .*day_2 (3 files): 36000 rows (parsed), train 24000, test 6000, val 6000" "$work/train.log" ||
  { echo "unexpected split:"; grep rows "$work/train.log"; exit 1; }
"$dlrm" --data "$work/days/day_*" "${model[@]}" --eval-only 1 --resume "$work/ckpt" >"$work/eval.log" 2>&1 ||
  { cat "$work/eval.log"; exit 1; }
grep -q "(from their caches)" "$work/eval.log" || { echo "the caches were not reused"; cat "$work/eval.log"; exit 1; }
trained=$(grep -o 'test_auc=[0-9.]*' "$work/train.log")
evaluated=$(grep -o 'test_auc=[0-9.]*' "$work/eval.log")
echo "trained: $trained, evaluated from the checkpoint: $evaluated"
[ -n "$trained" ] && [ "$trained" = "$evaluated" ] || { echo "DIFFER"; exit 1; }
awk -v a="${trained#test_auc=}" 'BEGIN { exit !(a > 0.6) }' || { echo "the model did not learn: $trained"; exit 1; }
"$dlrm" --data "$work/days/day_0" --test "$work/days/day_2" --val "$work/days/day_1" "${model[@]}" --steps 20 \
  >"$work/apart.log" 2>&1 || { cat "$work/apart.log"; exit 1; }
grep -q "train 12000, test 12000, val 12000" "$work/apart.log" || { grep rows "$work/apart.log"; exit 1; }
echo "MATCH"
