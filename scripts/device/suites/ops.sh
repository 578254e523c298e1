# The op benchmarks (ft-bench ops: each fused op against its twin, fwd+bwd, CUDA-event medians)
# and the fused AdamW (ft-bench adamw), with their PyTorch peers in the same call.
$B/bench/ft-bench ops >"$logs/bench-ops.log" 2>&1 || tail -20 "$logs/bench-ops.log"
python3 bench/peers/ops_torch.py >"$logs/bench-ops-torch.log" 2>&1 || tail -20 "$logs/bench-ops-torch.log"
$B/bench/ft-bench adamw >"$logs/bench-adamw.log" 2>&1 || tail -20 "$logs/bench-adamw.log"
python3 bench/peers/adamw_torch.py >"$logs/bench-adamw-torch.log" 2>&1 || tail -20 "$logs/bench-adamw-torch.log"
sed -n '/^op (fwd+bwd)/,/^$/p' "$logs/bench-ops.log" | while IFS= read -r line; do row "$line"; done
row "$(printf "%-24s %12s %12s %14s" "op vs PyTorch eager" "torch ms" "fused ms" "torch / fused")"
grep '^RESULT op=' "$logs/bench-ops-torch.log" | while read -r line; do
  name=$(sed -n 's/^RESULT op=\(.*\) torch_eager_ms=.*/\1/p' <<<"$line")
  torch_ms=$(sed -n 's/.*torch_eager_ms=\([0-9.]*\).*/\1/p' <<<"$line")
  ours=$(grep "^RESULT op=$name fused_ms=" "$logs/bench-ops.log" | sed -n 's/.* fused_eager_ms=\([0-9.]*\).*/\1/p')
  [ -n "$ours" ] && row "$(awk -v n="$name" -v t="$torch_ms" -v f="$ours" 'BEGIN { printf "%-24s %12.3f %12.3f %13.2fx", n, t, f, t / f }')"
done
# Each op's table: ours and the twin launched eagerly (as PyTorch eager is), then the graph replays.
grep '^RESULT op=' "$logs/bench-ops.log" | while read -r line; do
  name=$(sed -n 's/^RESULT op=\(.*\) fused_ms=.*/\1/p' <<<"$line")
  [ -n "$name" ] || continue
  value() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  torch_ms=$(grep -F "RESULT op=$name torch_eager_ms=" "$logs/bench-ops-torch.log" | sed -n 's/.*torch_eager_ms=\([0-9.]*\).*/\1/p')
  record "op $name, fwd+bwd" "fusedtrain, fused, eager launches" "$(value fused_eager_ms)"
  record "op $name, fwd+bwd" "fusedtrain, unfused, eager launches" "$(value unfused_eager_ms)"
  record "op $name, fwd+bwd" "PyTorch eager" "$torch_ms"
  record "op $name, fwd+bwd" "fusedtrain, fused, graph replay" "$(value fused_ms)"
  record "op $name, fwd+bwd" "fusedtrain, unfused, graph replay" "$(value unfused_ms)"
done
row "(fused ms here is eager, launch gaps included, to match PyTorch eager)"
sed -n '/^variant/,/^fused vs twin/p' "$logs/bench-adamw.log" | while IFS= read -r line; do row "$line"; done
ours=$(sed -n 's/^RESULT op=adamw-gpt2 graph_ms=\([0-9.]*\).*/\1/p' "$logs/bench-adamw.log")
torch_ms=$(result_value torch_fused_ms "$logs/bench-adamw-torch.log")
record "adamw-gpt2, graph" "fusedtrain, fused" "$ours"
record "adamw-gpt2, graph" "PyTorch AdamW(fused=True)" "$torch_ms"
[ -n "$ours" ] && [ -n "$torch_ms" ] &&
  row "$(awk -v t="$torch_ms" -v f="$ours" 'BEGIN { printf "adamw-gpt2: torch fused %.3f ms, ours %.3f ms, torch / ours %.2fx", t, f, t / f }')"
[ -n "$ours" ]
