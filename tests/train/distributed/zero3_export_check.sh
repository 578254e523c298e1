#!/usr/bin/env bash
# ZeRO-3 on 2 ranks writes the whole model: the --export-hf folder's weights equal the final
# checkpoint's bit for bit (both gathered from every rank's shards), with a validation pass (a
# forward on every rank, layers gathered in turn) every few steps on the way.
#   zero3_export_check.sh WORK COMPARE BINARY [ARGS...]
set -euo pipefail
work=$1 compare=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/exported"
FT_STORE_DIR="$work/rendezvous" FT_LAUNCH_GRACE=10 "$here/../../../scripts/launch.sh" 2 "$@" --zero 3 \
  --ckpt-dir "$work/ckpt" --export-hf "$work/hf" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
grep -h "data parallel over\|val loss" "$work/run.log" | head -3
last="$work/ckpt/$(cat "$work/ckpt/latest")"
cp "$work/hf/model.safetensors" "$work/exported/"
"$compare" "$last" "$work/exported" --rtol 0
