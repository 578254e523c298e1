# ft-mlp: one epoch of mlp-fmnist (batch 4096, the step replayed from a CUDA graph) in both kernel
# modes, and its PyTorch peer (eager and a whole-step graph) in the same call.
declare -A ms wall acc
for mode in unfused fused; do
  $B/examples/ft-mlp --device cuda --kernels "$mode" --epochs 1 --batch 4096 --log-every 5 --data-dir "$data" \
    --metrics "$logs/mlp-$mode.jsonl" >"$logs/mlp-$mode.log" 2>&1 || tail -5 "$logs/mlp-$mode.log"
  ms[$mode]=$(result_value median_ms "$logs/mlp-$mode.log")
  wall[$mode]=$(result_value wall_ms "$logs/mlp-$mode.log")
  acc[$mode]=$(result_value test_accuracy "$logs/mlp-$mode.log")
done
python3 bench/peers/mlp_torch.py >"$logs/mlp-torch.log" 2>&1 || tail -20 "$logs/mlp-torch.log"
row "$(printf "%-22s %-12s %-12s %-14s" "ft-mlp (batch 4096)" "gpu ms/step" "wall ms" "test accuracy")"
for mode in unfused fused; do
  row "$(printf "%-22s %-12s %-12s %-14s" "  $mode" "${ms[$mode]:-?}" "${wall[$mode]:-?}" "${acc[$mode]:-?}")"
done
torch_graph=$(result_value torch_graph_ms "$logs/mlp-torch.log")
torch_eager=$(result_value torch_eager_ms "$logs/mlp-torch.log")
record "mlp-fmnist B4096, step" "fusedtrain, fused" "${ms[fused]:-}" "test accuracy ${acc[fused]:-?} after one epoch"
record "mlp-fmnist B4096, step" "fusedtrain, unfused" "${ms[unfused]:-}"
record "mlp-fmnist B4096, step" "PyTorch, whole step in a CUDA graph" "$torch_graph"
record "mlp-fmnist B4096, step" "PyTorch, eager" "$torch_eager"
if [ -n "${ms[fused]:-}" ] && [ -n "${ms[unfused]:-}" ] && [ -n "$torch_graph" ]; then
  row "$(awk -v f="${ms[fused]}" -v u="${ms[unfused]}" -v g="$torch_graph" -v e="$torch_eager" 'BEGIN {
    printf "  fused %.2fx unfused; PyTorch whole-step graph %.3f ms (%.2fx ours), eager %.3f ms (%.2fx ours)", u / f, g, g / f, e, e / f }')"
fi
[ -n "${ms[fused]:-}" ]
