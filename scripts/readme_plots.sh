#!/usr/bin/env bash
# Draws the README's two pictures from the log folder of one scripts/device/run.sh unfused call
# (logs-unfused/ out of its logs-unfused.tgz): ft-mlp's loss curves, fused and unfused, and
# ft-bench's fused / unfused bars beside the PyTorch peers measured in the same call.
#   scripts/readme_plots.sh LOGS_DIR [OUT_DIR=docs/img]
# Bars: ours as each workload's bench runs by default (gpt2 eager, the rest graph-replayed);
# "PyTorch, same ops" is the peer that runs the twin's op sequence (naive attention, for-loop
# AdamW, layer norm and cross-entropy under autocast written as the twin writes them);
# "PyTorch, fastest" is the quickest PyTorch path that call measured (SDPA, a whole-step CUDA
# graph, fused AdamW, F.layer_norm, bf16 cross-entropy).
set -euo pipefail
cd "$(dirname "$0")/.."
logs=${1:?usage: scripts/readme_plots.sh LOGS_DIR [OUT_DIR]}
out=${2:-docs/img}
mkdir -p "$out"
python3 scripts/plot.py loss "$logs/mlp-loss-fused.jsonl" "$logs/mlp-loss-unfused.jsonl" --labels fused,unfused \
  -o "$out/mlp-loss.png"
same="torch eager naive foreach=PyTorch same ops,torch for-loop=PyTorch same ops,torch eager autocast=PyTorch same ops"
same+=",torch eager composite=PyTorch same ops,torch eager=PyTorch same ops"
fastest="torch sdpa=PyTorch fastest,torch graph=PyTorch fastest,torch fused=PyTorch fastest"
fastest+=",residual+layernorm:torch eager=PyTorch fastest,cross-entropy V=50304:torch eager=PyTorch fastest"
python3 scripts/plot.py bench "$logs"/{gpt2-graph0,gpt2-torch,mlp-graph1,mlp-torch,ops,ops-torch,adamw,adamw-torch}.json \
  --rename "$same,$fastest" --variants "fused,unfused,PyTorch same ops,PyTorch fastest" \
  --workloads "gpt2-124M,mlp-fmnist,attention HS64,adamw-gpt2,residual+layernorm,cross-entropy V=50304" \
  --title "ms per training step or fwd+bwd, $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["device"] + ", " + d["date"])' "$logs/ops.json")" \
  -o "$out/bench.png"
