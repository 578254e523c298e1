# Llama (issue 50): the transformers parity script in both kernel modes (step 1's loss and
# gradients, a 20-step AdamW curve, the exported folder loaded by from_pretrained), and the
# tokenizer's parity with the tokenizers package.
# f32 in unfused mode first: the model's arithmetic against transformers' at 1e-4, with no
# rounding to blame.
declare -A llama_parity
for run in unfused:f32 fused:bf16 unfused:bf16; do
  timeout 300 python3 tests/parity/llama_parity.py --ft $B/tests/ft-llama-parity --kernels ${run%%:*} \
    --dtype ${run##*:} >"$logs/llama-parity-${run/:/-}.log" 2>&1
  llama_parity[$run]=$(grep -o 'RESULT llama parity .*' "$logs/llama-parity-${run/:/-}.log" ||
    echo "no result (see llama-parity-${run/:/-}.log)")
  grep -E '^(step 1 loss|gradients|loss curve|export|FAIL|Traceback|error)' "$logs/llama-parity-${run/:/-}.log"
done
timeout 300 python3 tests/train/data/tokenizer_parity.py $B/examples/ft-tokenize /tmp/ft-tokenizer-parity \
  $B/examples/ft-gpt2 >"$logs/tokenizer-parity.log" 2>&1
tokenizer=$(tail -1 "$logs/tokenizer-parity.log")

{
echo
echo "== fusedtrain Llama device check ($(date -u +%F), $(gpu_name)) =="
for run in unfused:f32 fused:bf16 unfused:bf16; do echo "llama parity $run: ${llama_parity[$run]}"; done
echo "tokenizer: $tokenizer"
} | tee -a "$summary"
