# Llama (issue 50): the transformers parity script in both kernel modes (step 1's loss and
# gradients, a 20-step AdamW curve, the exported folder loaded by from_pretrained), LoRA through
# ft-gpt2 --init-from a Hugging Face folder against PEFT in both modes, the model's GPU gtests,
# and the tokenizer's parity with the tokenizers package.
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
declare -A lora_parity
for kernels in fused unfused; do
  timeout 300 python3 tests/parity/llama_lora_parity.py --ft $B/examples/ft-gpt2 --kernels $kernels \
    >"$logs/llama-lora-parity-$kernels.log" 2>&1
  lora_parity[$kernels]=$(grep -o 'RESULT llama-lora-parity .*' "$logs/llama-lora-parity-$kernels.log" ||
    echo "no result (see llama-lora-parity-$kernels.log)")
  grep -E 'FAIL|Traceback|Error' "$logs/llama-lora-parity-$kernels.log" | head -5
done
$B/tests/ft_tests --gtest_filter='LlamaCuda*:Llama*:HfLlama*' >"$logs/llama-gtest.log" 2>&1
timeout 300 python3 tests/train/data/tokenizer_parity.py $B/examples/ft-tokenize /tmp/ft-tokenizer-parity \
  $B/examples/ft-gpt2 >"$logs/tokenizer-parity.log" 2>&1
tokenizer=$(tail -1 "$logs/tokenizer-parity.log")

{
echo
echo "== fusedtrain Llama device check ($(date -u +%F), $(gpu_name)) =="
for run in unfused:f32 fused:bf16 unfused:bf16; do echo "llama parity $run: ${llama_parity[$run]}"; done
for kernels in fused unfused; do echo "llama LoRA against PEFT, $kernels: ${lora_parity[$kernels]}"; done
echo "Llama gtests on the GPU: $(gtest_counts "$logs/llama-gtest.log")"
echo "tokenizer: $tokenizer"
} | tee -a "$summary"
