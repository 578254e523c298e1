# LoRA: its tests, the PEFT parity script in both kernel modes, the exact resume of a run with
# adapter dropout, `ft-bench ops --only lora`, and `ft-bench lora` against its PyTorch peer (eager
# and torch.compile).
$B/tests/ft_tests --gtest_filter='*LoRA*:*Lora*' >"$logs/gtest.log" 2>&1
tests=$(grep -E '^\[  (PASSED|FAILED) ' "$logs/gtest.log" | tr '\n' ' ')
declare -A parity
for mode in fused unfused; do
  timeout 200 python3 tests/parity/lora_parity.py --ft $B/examples/ft-gpt2 --kernels $mode >"$logs/parity-$mode.log" 2>&1
  parity[$mode]=$(grep -o 'RESULT lora-parity .*' "$logs/parity-$mode.log" || echo "no result (see parity-$mode.log)")
done
timeout 150 tests/train/resume_check.sh $B/examples/ft-gpt2 /tmp/ft-lora-resume --train 'tests/data/text/*.txt' --format text \
  --model d6 --batch 8 --seq 128 --device cuda --lora-rank 16 --lora-dropout 0.1 >"$logs/resume.log" 2>&1
resume=$([ $? -eq 0 ] && echo "exact (steps 21-30 identical)" || echo "FAILED (see resume.log)")

timeout 200 $B/bench/ft-bench ops --only lora >"$logs/ops-lora.log" 2>&1 || tail -5 "$logs/ops-lora.log"
timeout 120 $B/bench/ft-bench lora >"$logs/lora.log" 2>&1 || tail -5 "$logs/lora.log"
for mode in eager compile; do
  (cd bench/peers && timeout 200 python3 lora_torch.py --mode $mode) >"$logs/lora-torch-$mode.log" 2>&1 ||
    tail -5 "$logs/lora-torch-$mode.log"
done

{
echo
echo "== fusedtrain LoRA device check ($(date -u +%F), $(gpu_name)) =="
echo "LoRA tests: $tests"
for mode in fused unfused; do echo "parity $mode: ${parity[$mode]}"; done
echo "LoRA resume (dropout 0.1) on the GPU: $resume"
echo
grep -v '^RESULT' "$logs/ops-lora.log" | sed -n '/^lora_linear/,$p'
echo
grep '^RESULT lora' "$logs/lora.log"
ours=$(sed -n 's/^RESULT lora kernels=fused graph=1 ms=\([0-9.]*\).*/\1/p' "$logs/lora.log")
record "lora-gpt2 r16" "fusedtrain, fused" "$ours"
for mode in eager compile; do
  grep '^RESULT lora-gpt2' "$logs/lora-torch-$mode.log" | sed 's/^RESULT /peer: /'
  peer=$(sed -n 's/^RESULT lora-gpt2 torch=[a-z]* rank=16 dropout=0 ms=\([0-9.]*\).*/\1/p' "$logs/lora-torch-$mode.log")
  record "lora-gpt2 r16" "PyTorch + PEFT-style adapters, $mode" "$peer"
  [ -n "$ours" ] && [ -n "$peer" ] &&
    awk -v o="$ours" -v p="$peer" -v m="$mode" 'BEGIN { printf "lora-gpt2: torch %s %.2f ms, ours %.2f ms, torch / ours %.2fx\n", m, p, o, p / o }'
done
} | tee -a "$summary"
