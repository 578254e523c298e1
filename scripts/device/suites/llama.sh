# Llama (issue 50): the transformers parity script in both kernel modes (step 1's loss and
# gradients, a 20-step AdamW curve, the exported folder loaded by from_pretrained), and the
# tokenizer's parity with the tokenizers package.
declare -A llama_parity
for mode in fused unfused; do
  timeout 300 python3 tests/parity/llama_parity.py --ft $B/tests/ft-llama-parity --kernels $mode \
    >"$logs/llama-parity-$mode.log" 2>&1
  llama_parity[$mode]=$(grep -o 'RESULT llama parity .*' "$logs/llama-parity-$mode.log" ||
    echo "no result (see llama-parity-$mode.log)")
  grep -E '^(step 1 loss|gradients|loss curve|export|FAIL|Traceback|error)' "$logs/llama-parity-$mode.log"
done
timeout 300 python3 tests/train/data/tokenizer_parity.py $B/examples/ft-tokenize /tmp/ft-tokenizer-parity \
  $B/examples/ft-gpt2 >"$logs/tokenizer-parity.log" 2>&1
tokenizer=$(tail -1 "$logs/tokenizer-parity.log")

{
echo
echo "== fusedtrain Llama device check ($(date -u +%F), $(gpu_name)) =="
for mode in fused unfused; do echo "llama parity $mode: ${llama_parity[$mode]}"; done
echo "tokenizer: $tokenizer"
} | tee -a "$summary"
