# Models larger than one GPU (issue 51): scripts/device/run.sh large[:gpt2|llama|all]
# gpt2: GPT-2 1.5B (--model d48: 48 layers, width 1600, 25 heads), B 16, T 1024, on one GPU with
#   each --recompute mode, against the 124M step (d12) of the same call: tok/s, MFU, peak memory.
# llama: Llama-3.1-8B's shape with random weights (32 layers, width 4096, 32 query and 8 KV
#   heads, MLP 14,336, vocabulary 128,256), B 1 a GPU, T $LARGE_SEQ (8192), on every GPU of the
#   machine through scripts/launch.sh, with ZeRO-3, with selective recomputation and without;
#   then PyTorch FSDP2 (bench/peers/fsdp_llama.py: fully_shard, torch.compile, SDPA) under
#   torchrun on the same GPUs, with torchtitan's selective activation checkpointing and
#   without: tok/s a GPU and the ratios.
suite=${SUITE_ARG:-all}
N=$(gpu_count)
G=$B/examples/ft-gpt2
seq=${LARGE_SEQ:-8192}
python3 scripts/make_token_shard.py /tmp/shard.bin --tokens 20000000 >/dev/null
port=29900
row "== larger models '$suite' ($N x $(gpu_name)) =="

# "tok/s a GPU, MFU, peak" of an ft-gpt2 log's RESULT line.
ours() {
  local log=$1
  echo "wall $(result_value wall_ms "$log") ms/step, $(result_value tok_per_s "$log") tok/s a GPU, MFU $(result_value mfu "$log"), peak $(result_value peak_gb "$log") GB (rank 0) $(grep -o 'error:.*' "$log" | head -1 | cut -c1-200)"
}

gpt2_large() {
  phase "gpt2 d12 and d48"
  local gpt="--train /tmp/shard.bin --batch 16 --seq 1024 --log-every 10"
  timeout 120 $G $gpt --model d12 --steps 60 >"$logs/d12.log" 2>&1
  row "gpt2 d12 (124M) B16 T1024: $(ours "$logs/d12.log")"
  for mode in none selective block; do
    timeout 200 $G $gpt --model d48 --steps 30 --recompute $mode >"$logs/d48-$mode.log" 2>&1
    row "gpt2 d48 (1.5B) B16 T1024 --recompute $mode: $(ours "$logs/d48-$mode.log")"
    grep -h 'memory a rank' "$logs/d48-$mode.log" | head -1 | sed 's/^/  /' >>"$summary"
  done
}

# One variant of ours: name, then ft-gpt2's extra flags.
llama_ours() {
  local name=$1
  shift
  port=$((port + 7))
  FT_RUN_ID=large-$name MASTER_PORT=$port timeout 300 scripts/launch.sh $N $G --arch llama --model 8b \
    --train /tmp/shard.bin --batch 1 --seq $seq --log-every 1 --steps 12 "$@" >"$logs/llama8b-$name.log" 2>&1
  row "llama 8b on $N GPUs, B1 T$seq, $name: $(ours "$logs/llama8b-$name.log")"
  grep -h 'memory a rank\|start-up\|in the last step' "$logs/llama8b-$name.log" | head -4 | sed 's/^/  /' >>"$summary"
}

# One run of the FSDP2 peer: name, then fsdp_llama.py's --ac.
fsdp_peer() {
  local name=$1 ac=$2
  (cd bench/peers && timeout 420 torchrun --standalone --nproc_per_node $N fsdp_llama.py --seq $seq --ac $ac) \
    >"$logs/fsdp-llama-$name.log" 2>&1 || tail -20 "$logs/fsdp-llama-$name.log"
  row "PyTorch FSDP2 + compile, $name: $(grep -o 'RESULT.*' "$logs/fsdp-llama-$name.log" || echo "no result (see fsdp-llama-$name.log)")"
}

# "ours against the peer": tok/s a GPU of an ft-gpt2 log over a peer log's.
ratio() {
  local a b
  a=$(result_value tok_per_s "$logs/llama8b-$1.log")
  b=$(grep -o 'tok_per_s_per_gpu=[0-9]*' "$logs/fsdp-llama-$2.log" | cut -d= -f2)
  row "llama 8b, ours ($1) against FSDP2 ($2): $(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "?" }')"
}

llama_large() {
  phase "llama 8b, ours"
  llama_ours zero3-selective --zero 3 --recompute selective
  llama_ours zero3-none --zero 3 --recompute none
  phase "llama 8b, FSDP2 peer"
  fsdp_peer selective-ac selective
  fsdp_peer no-ac none
  ratio zero3-selective selective-ac
  ratio zero3-none no-ac
  ratio zero3-none selective-ac
}

case $suite in
  gpt2) gpt2_large ;;
  llama) llama_large ;;
  all) gpt2_large; llama_large ;;
  *) row "large: unknown part '$suite' (gpt2, llama or all)"; exit 2 ;;
esac
