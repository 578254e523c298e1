#!/usr/bin/env bash
# ft-dlrm on a file whose labels are all 0 trains to the end, writes its checkpoint, and reports
# every metric it can, naming the AUC it cannot measure; a file too small for dlrm's split is
# refused before any training.
#   dlrm_unmeasurable_check.sh WORK FT_DLRM
set -euo pipefail
work=$1 dlrm=$2
rm -rf "$work" && mkdir -p "$work"
"$dlrm" --make-synthetic "$work/mixed.tsv" --rows 700 --table-rows 100 >/dev/null
# Every label (the first column) set to 0.
awk 'BEGIN { FS = OFS = "\t" } { $1 = 0; print }' "$work/mixed.tsv" >"$work/zeros.tsv"
args=(--device cpu --table-rows 100 --dim 8 --bottom 16-8 --top 16-1 --batch 32 --steps 6 --log-every 3)
"$dlrm" --data "$work/zeros.tsv" "${args[@]}" --ckpt-dir "$work/ckpt" >"$work/zeros.log" 2>&1 || { cat "$work/zeros.log"; exit 1; }
cat "$work/zeros.log"
grep -q "AUC not measurable (the labels are all of one class)" "$work/zeros.log"
grep -q "RESULT .*test_auc=nan" "$work/zeros.log"
[ -d "$work/ckpt/step_00000006" ] || { echo "no checkpoint of the last step"; exit 1; }
head -10 "$work/mixed.tsv" >"$work/small.tsv"
if "$dlrm" --data "$work/small.tsv" "${args[@]}" >"$work/small.log" 2>&1; then
  echo "a 10-row file was accepted"; exit 1
fi
cat "$work/small.log"
grep -q "too few for dlrm's split" "$work/small.log"
echo "PASS"
