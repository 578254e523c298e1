# Llama (issue 50), in two parts (scripts/device/run.sh llama[:checks|bench|all]; checks alone by
# default):
# checks: the transformers parity script in both kernel modes (step 1's loss and gradients, a
#   20-step AdamW curve, the exported folder loaded by from_pretrained), LoRA through ft-gpt2
#   --init-from a Hugging Face folder against PEFT in both modes, the model's GPU gtests, and the
#   tokenizer's parity with the tokenizers package.
# bench: ft-bench llama (Llama-3.2-1B's shape, B 4, T 2048), the full step in both kernel modes
#   and the LoRA r 16 step, against transformers' LlamaForCausalLM with torch.compile, SDPA and
#   fused AdamW (PEFT's adapters for LoRA) in the same call, and the unfused mode against the
#   same model run eagerly.
checks() {
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
}

bench() {
  timeout 420 $B/bench/ft-bench llama --graph 1 >"$logs/ft-llama.log" 2>&1 || tail -5 "$logs/ft-llama.log"
  timeout 240 $B/bench/ft-bench llama --lora 1 --kernels fused --graph 1 >"$logs/ft-llama-lora.log" 2>&1 ||
    tail -5 "$logs/ft-llama-lora.log"
  for lora in 0 1; do
    (cd bench/peers && timeout 400 python3 llama_torch.py --mode compile --lora $lora) \
      >"$logs/llama-torch-lora$lora.log" 2>&1 || tail -5 "$logs/llama-torch-lora$lora.log"
  done
  # Eager PyTorch with SDPA (what a PyTorch user gets without compile), and with transformers'
  # eager attention (matmul, softmax, matmul): the same ops as the unfused mode, its fair peer.
  (cd bench/peers && timeout 300 python3 llama_torch.py --mode eager --lora 0) >"$logs/llama-torch-eager.log" 2>&1 ||
    tail -5 "$logs/llama-torch-eager.log"
  (cd bench/peers && timeout 300 python3 llama_torch.py --mode eager --attention eager --lora 0) \
    >"$logs/llama-torch-eager-attention.log" 2>&1 || tail -5 "$logs/llama-torch-eager-attention.log"
  {
  echo
  echo "== fusedtrain Llama-3.2-1B shape, B 4, T 2048 ($(date -u +%F), $(gpu_name)) =="
  grep -h '^RESULT' "$logs/ft-llama.log" "$logs/ft-llama-lora.log" "$logs/llama-torch-lora0.log" \
    "$logs/llama-torch-lora1.log" "$logs/llama-torch-eager.log" "$logs/llama-torch-eager-attention.log"
  unfused=$(sed -n "s/^RESULT llama kernels=unfused graph=[01] ms=\([0-9.]*\).*/\1/p" "$logs/ft-llama.log")
  for run in eager:llama-torch-eager.log:SDPA eager-attention-eager:llama-torch-eager-attention.log:"eager attention"; do
    IFS=: read -r mode log label <<<"$run"
    eager=$(sed -n "s/^RESULT llama torch=$mode ms=\([0-9.]*\).*/\1/p" "$logs/$log")
    [ -n "$unfused" ] && [ -n "$eager" ] &&
      awk -v o="$unfused" -v p="$eager" -v l="$label" \
        'BEGIN { printf "llama unfused: PyTorch eager (%s) %.1f ms, ours unfused %.1f ms: %.2fx\n", l, p, o, p / o }'
  done
  for pair in "llama:ft-llama.log:llama-torch-lora0.log" "lora-llama:ft-llama-lora.log:llama-torch-lora1.log"; do
    IFS=: read -r name ours_log peer_log <<<"$pair"
    ours=$(sed -n "s/^RESULT $name kernels=fused graph=[01] ms=\([0-9.]*\).*/\1/p" "$logs/$ours_log")
    peer=$(sed -n "s/^RESULT $name torch=compile ms=\([0-9.]*\).*/\1/p" "$logs/$peer_log")
    record "$name-1b" "fusedtrain, fused" "$ours"
    record "$name-1b" "PyTorch torch.compile" "$peer"
    [ -n "$ours" ] && [ -n "$peer" ] &&
      awk -v o="$ours" -v p="$peer" -v n="$name" 'BEGIN { printf "%s: torch.compile %.1f ms, ours %.1f ms: %.2fx\n", n, p, o, p / o }'
  done
  } | tee -a "$summary"
}

case "${SUITE_ARG:-checks}" in
  checks) checks ;;
  bench) bench ;;
  all) checks && bench ;;
  *) echo "llama: unknown part '$SUITE_ARG' (checks, bench, all)"; exit 2 ;;
esac
