# GPT-2: the PyTorch parity script in both kernel modes, the exact resume on the GPU, the attention
# table against PyTorch's SDPA and eager peers, and ft-bench gpt2 against torch.compile.
declare -A parity
for mode in fused unfused; do
  timeout 150 python3 tests/parity/gpt2_parity.py --ft $B/examples/ft-gpt2 --kernels $mode >"$logs/parity-$mode.log" 2>&1
  parity[$mode]=$(grep -o 'RESULT parity .*' "$logs/parity-$mode.log" || echo "no result (see parity-$mode.log)")
  grep -E '^(step 1 loss|gradients|loss curve|FAIL)' "$logs/parity-$mode.log"
done
timeout 150 tests/train/resume_check.sh $B/examples/ft-gpt2 /tmp/ft-resume --train 'tests/data/text/*.txt' --format text \
  --model d6 --batch 8 --seq 128 --device cuda >"$logs/resume.log" 2>&1
resume=$([ $? -eq 0 ] && echo "exact (steps 21-30 identical)" || echo "FAILED (see resume.log)")

timeout 150 $B/bench/ft-bench ops --only attention >"$logs/attention.log" 2>&1 || tail -5 "$logs/attention.log"
timeout 90 python3 bench/peers/ops_torch.py --only attention >"$logs/attention-torch.log" 2>&1 || tail -5 "$logs/attention-torch.log"
timeout 240 $B/bench/ft-bench gpt2 --graph 1 >"$logs/gpt2.log" 2>&1 || tail -5 "$logs/gpt2.log"
(cd bench/peers && timeout 150 python3 gpt2_torch.py) >"$logs/gpt2-torch.log" 2>&1 || tail -5 "$logs/gpt2-torch.log"

{
echo
echo "== fusedtrain GPT-2 device check ($(date -u +%F), $(gpu_name)) =="
for mode in fused unfused; do echo "parity $mode: ${parity[$mode]}"; done
echo "resume on the GPU: $resume"
echo
grep -E '^causal attention|^B[0-9]+ NH|^ +(mma.sync|twin|batched)' "$logs/attention.log"
grep '^RESULT attention=' "$logs/attention-torch.log" | sed 's/^RESULT /torch: /'
echo
sed -n '/^kernels/,$p' "$logs/gpt2.log" | grep -v '^RESULT'
grep '^RESULT gpt2' "$logs/gpt2-torch.log" | sed 's/^RESULT /peer: /'
ours=$(sed -n 's/^RESULT gpt2 kernels=fused graph=[01] ms=\([0-9.]*\).*/\1/p' "$logs/gpt2.log")
peer=$(sed -n 's/^RESULT gpt2 torch=compile ms=\([0-9.]*\).*/\1/p' "$logs/gpt2-torch.log")
record "gpt2-124M B16 T1024" "fusedtrain, fused" "$ours" "$(sed -n 's/^RESULT gpt2 kernels=fused .*\(tok_per_s=[0-9]*\).*/\1/p' "$logs/gpt2.log")"
record "gpt2-124M B16 T1024" "fusedtrain, unfused" "$(sed -n 's/^RESULT gpt2 kernels=unfused graph=[01] ms=\([0-9.]*\).*/\1/p' "$logs/gpt2.log")"
for mode in compile eager; do
  record "gpt2-124M B16 T1024" "PyTorch, torch.$mode" "$(sed -n "s/^RESULT gpt2 torch=$mode ms=\([0-9.]*\).*/\1/p" "$logs/gpt2-torch.log")"
done
# Causal attention, B16 T1024, forward + backward in one graph.
for hs in 64 128; do
  line=$(grep "^RESULT attention=HS$hs fused_fwd_ms=" "$logs/attention.log")
  value() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  workload="causal attention HS$hs B16 T1024, fwd+bwd"
  record "$workload" "fusedtrain, fused" "$(value fused_total_ms)" "fwd $(value fused_fwd_tflops), bwd $(value fused_bwd_tflops) TF/s"
  record "$workload" "fusedtrain, twin" "$(value twin_total_ms)"
  for peer in sdpa eager; do
    line=$(grep "^RESULT attention=HS$hs torch=$peer " "$logs/attention-torch.log")
    record "$workload" "PyTorch $peer" "$(value total_ms)" "$([ $peer = sdpa ] && echo "fwd $(value fwd_tflops), bwd $(value bwd_tflops) TF/s")"
  done
done
[ -n "$ours" ] && [ -n "$peer" ] &&
  awk -v o="$ours" -v p="$peer" 'BEGIN { printf "gpt2-124M: torch.compile %.2f ms, ours %.2f ms, torch / ours %.3fx\n", p, o, p / o }'
} | tee -a "$summary"
