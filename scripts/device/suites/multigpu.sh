# On a machine of several GPUs (nvidia-h200-x2 or -x4): data parallelism across real GPUs.
#   scripts/device/run.sh multigpu:functional|multigpu:scaling|multigpu:sharded|multigpu:tune|multigpu:all
# functional: each launcher (scripts/launch.sh, torchrun on one node, two torchrun agents as two
#   nodes, mpirun when OpenMPI is there) puts N ranks on N different GPUs (each rank names its
#   GPU's PCI bus id, and nvidia-smi shows one process per GPU) and checks every collective; two
#   nodes on one host with NCCL kept off NVLink and shared memory give the NVLink run's losses;
#   a rank killed (SIGKILL) or frozen (SIGSTOP) during graph replay, or during a checkpoint
#   write, stops the others within --comm-timeout + 10 s with an error naming it, and the last
#   checkpoint still resumes.
# scaling: gpt2-124M (B 16 a GPU, T 1024, graph on) on 1 and N GPUs, f32 and bf16 reduction,
#   ZeRO-1, the PyTorch DDP peer (bench/peers/ddp_gpt2.py) under torchrun in the same call, the
#   reduction alone (ft-comm-check --bench-mb) and so the share of it hidden behind backward; a
#   500-step loss curve reduced in bf16 against f32; ft-mlp and ft-dlrm on N GPUs against one
#   process with the global batch.
# sharded: DLRM tables sharded over the GPUs: the sharded tables against whole ones on N GPUs,
#   ft-dlrm's mlperf preset on one GPU and on N with each --sharding, a sharded checkpoint
#   resumed on one GPU, row-wise tables' losses step by step against the replicated run's, and
#   the criteo1tb preset on synthetic day files (element-wise and row-wise Adagrad, dot and DCNv2).
suite=${SUITE_ARG:-all}
N=$(gpu_count)
nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader >"$logs/gpus.txt"
nvidia-smi topo -m >"$logs/topo.txt" 2>&1
row "== multi-GPU suite '$suite' ($N x $(gpu_name)) =="
G=$B/examples/ft-gpt2
python3 scripts/make_token_shard.py /tmp/shard.bin --tokens 20000000
cat /usr/lib/python3*/*.py >/tmp/corpus.txt 2>/dev/null
port=29600
next_port() { port=$((port + 7)); echo $port; }

# ---- functional ----
# A run's N ranks name N distinct PCI bus ids, and nvidia-smi sees N processes on N GPUs.
placement() {
  local name=$1
  shift
  local log=$logs/place-$name.log
  "$@" >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do
    [ "$(grep -c 'all collectives match' "$log")" -ge "$N" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
  done
  nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader >"$logs/place-$name-smi.txt" 2>&1
  wait $pid
  local rc=$?
  local named apps gpus
  named=$(grep -o 'PCI [0-9A-Fa-f:.]*' "$log" | sort -u | wc -l)
  apps=$(grep -c . "$logs/place-$name-smi.txt")
  gpus=$(cut -d, -f2 "$logs/place-$name-smi.txt" | sort -u | grep -c .)
  local ok=FAIL
  [ $rc -eq 0 ] && [ "$named" -eq "$N" ] && [ "$(grep -c 'all collectives match' "$log")" -eq "$N" ] && ok=ok
  row "placement $name: $ok (exit $rc; $N ranks named $named distinct GPUs; nvidia-smi: $apps processes on $gpus GPUs)"
}

functional() {
  phase "gpu tests"
  # The data-parallel and launch tests on the GPU (NCCL at world size 1, the pinning probe).
  if ninja -C $B ft_tests >"$logs/build-tests.log" 2>&1; then
    $B/tests/ft_tests --gtest_filter='*DataParallel*:*LaunchEnv*:*GradBuffer*' >"$logs/gtest.log" 2>&1
    row "gtest (DataParallel, LaunchEnv, GradBuffer on the GPU): $(grep -E '^\[  (PASSED|FAILED) +\]' "$logs/gtest.log" | tr '\n' ' ')"
  else
    row "gtest: BUILD FAILED"
  fi
  phase placement
  FT_RUN_ID=place-launch MASTER_PORT=$(next_port) placement launch.sh \
    scripts/launch.sh $N $B/tests/ft-comm-check --device cuda --hold-ms 3000
  placement torchrun torchrun --standalone --nproc_per_node $N --no-python $B/tests/ft-comm-check --device cuda \
    --hold-ms 3000
  if command -v mpirun >/dev/null; then
    placement mpirun mpirun --allow-run-as-root --oversubscribe -np $N -x NCCL_NVLS_ENABLE -x MASTER_PORT=$(next_port) \
      -x FT_RUN_ID=place-mpi $B/tests/ft-comm-check --device cuda --hold-ms 3000
  else
    row "placement mpirun: not run (no mpirun on this machine)"
  fi

  phase "two nodes"
  # The same 30 steps over NVLink (launch.sh) and as two torchrun nodes of N/2 GPUs each, their
  # NCCL kept off NVLink and shared memory (its network transport, as between two hosts).
  local gpt="--train /tmp/shard.bin --model d12 --batch 8 --seq 1024 --steps 30 --log-every 1 --lr 6e-4"
  FT_RUN_ID=nvlink MASTER_PORT=$(next_port) scripts/launch.sh $N $G $gpt --metrics $logs/nvlink.jsonl \
    >"$logs/nvlink.log" 2>&1
  local half=$((N / 2)) rdzv=$(next_port)
  for nr in 0 1; do
    local gpus
    gpus=$(seq -s, $((nr * half)) $((nr * half + half - 1)))
    CUDA_VISIBLE_DEVICES=$gpus NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 torchrun --nnodes 2 --nproc_per_node $half \
      --node_rank $nr --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$rdzv --rdzv_id twonode --no-python \
      $G $gpt --metrics $logs/twonode.jsonl >"$logs/twonode-$nr.log" 2>&1 &
  done
  wait
  local transport
  transport=$(grep -h -o 'rank 0 of [0-9]*: .*' "$logs"/twonode-*.log | head -1)
  row "two torchrun nodes (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): $(python3 - "$logs/nvlink.jsonl" "$logs/twonode.jsonl" <<'PY'
import json, sys
def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
    except OSError:
        return []
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if not a or len(a) != len(b):
    print(f"FAIL: {len(a)} and {len(b)} losses")
else:
    d = max(abs(x - y) for x, y in zip(a, b))
    print(f"{'ok' if d == 0 else 'DIFFER'}: {len(a)} losses, largest difference {d:.3g} (last {a[-1]:.4f} / {b[-1]:.4f})")
PY
)"
  grep -h "NET/\|via NET\|Using network" "$logs"/twonode-*.log | head -2 >>"$logs/twonode-transport.txt"

  phase "dead ranks"
  # Two ranks started by hand (their process ids known); after step 40 rank 1 is killed or
  # stopped; rank 0 must exit non-zero within --comm-timeout + 10 s naming rank 1.
  local small="--train /tmp/shard.bin --model d6 --batch 8 --seq 256 --steps 100000 --log-every 10 --comm-timeout 10"
  for sig in KILL STOP; do
    local p=$(next_port) d=$logs/dead-$sig
    mkdir -p "$d"
    WORLD_SIZE=2 MASTER_PORT=$p FT_RUN_ID=dead-$sig RANK=0 LOCAL_RANK=0 $G $small >"$d/r0.log" 2>&1 &
    local p0=$!
    WORLD_SIZE=2 MASTER_PORT=$p FT_RUN_ID=dead-$sig RANK=1 LOCAL_RANK=1 $G $small >"$d/r1.log" 2>&1 &
    local p1=$!
    for _ in $(seq 1 600); do grep -q '^step *40/' "$d/r0.log" && break; sleep 0.1; done
    kill -$sig $p1
    local start=$(date +%s.%N) rc=none
    for _ in $(seq 1 400); do kill -0 $p0 2>/dev/null || break; sleep 0.1; done
    local took
    took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    if kill -0 $p0 2>/dev/null; then kill -KILL $p0; rc=hung; else wait $p0; rc=$?; fi
    kill -KILL $p1 2>/dev/null
    wait $p1 2>/dev/null
    local ok=FAIL
    [ "$rc" != hung ] && [ "$rc" -ne 0 ] && grep -q "no answer from rank 1" "$d/r0.log" && ok=ok
    row "SIG$sig rank 1 during graph replay: $ok (rank 0 exit $rc after $took s, limit 20): $(grep -o 'error:.*' "$d/r0.log" | head -1 | cut -c1-220)"
  done
  # During a checkpoint write: rank 0 (the writer) is killed while its step folder is still .tmp;
  # rank 1 must stop naming rank 0, and the newest complete checkpoint must resume.
  local p=$(next_port) d=$logs/dead-ckpt
  mkdir -p "$d/ck"
  local ckpt="--train /tmp/shard.bin --model d12 --batch 8 --seq 256 --steps 100000 --log-every 10 --comm-timeout 10"
  WORLD_SIZE=2 MASTER_PORT=$p FT_RUN_ID=dead-ckpt RANK=0 LOCAL_RANK=0 $G $ckpt --ckpt-dir "$d/ck" --ckpt-every 20 \
    >"$d/r0.log" 2>&1 &
  local p0=$!
  WORLD_SIZE=2 MASTER_PORT=$p FT_RUN_ID=dead-ckpt RANK=1 LOCAL_RANK=1 $G $ckpt --ckpt-dir "$d/ck" --ckpt-every 20 \
    >"$d/r1.log" 2>&1 &
  local p1=$!
  local caught=no
  for _ in $(seq 1 3000); do
    if ls -d "$d"/ck/step_*.tmp >/dev/null 2>&1 && [ -e "$d/ck/latest" ]; then caught=yes; break; fi
    sleep 0.02
  done
  kill -KILL $p0
  local start=$(date +%s.%N) rc=none
  for _ in $(seq 1 400); do kill -0 $p1 2>/dev/null || break; sleep 0.1; done
  local took
  took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  if kill -0 $p1 2>/dev/null; then kill -KILL $p1; rc=hung; else wait $p1; rc=$?; fi
  wait $p0 2>/dev/null
  ls -la "$d/ck" >"$d/ck-listing.txt" 2>&1
  local resumed at
  at=$(cat "$d/ck/latest" 2>/dev/null | grep -o '[0-9]*' | head -1)
  # One process resumes the 2-rank run: the same global batch (2 x 8 sequences).
  $G --train /tmp/shard.bin --model d12 --batch 16 --seq 256 --log-every 5 --resume "$d/ck" --steps $((10#${at:-0} + 5)) \
    >"$d/resume.log" 2>&1
  resumed=$([ $? -eq 0 ] && grep -o 'resumed from step [0-9]*' "$d/resume.log" || echo "FAILED: $(grep -o 'error:.*' "$d/resume.log" | head -1)")
  rm -rf "$d/ck"  # gigabytes: not for the logs
  local ok=FAIL
  [ "$rc" != hung ] && [ "$rc" -ne 0 ] && grep -q "no answer from rank 0" "$d/r1.log" && ok=ok
  row "SIGKILL rank 0 during its checkpoint write (caught in the write: $caught): $ok (rank 1 exit $rc after $took s): $(grep -o 'error:.*' "$d/r1.log" | head -1 | cut -c1-160); latest=${at:-none}, $resumed"
}

# The median wall ms of a log's windows ending after step 100 ("step  150/300 | ... | 28.41 ms |").
late_windows() {
  grep '^step' "$1" | awk -F'|' '{ split($1, a, "[ /]+"); if (a[2] > 100) { sub(/ ms/, "", $5); print $5 + 0 } }' |
    sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---- scaling ----
scaling() {
  phase "gpt2 scaling"
  # 300 steps: a step's time moves by up to a millisecond between 20-step windows (on one GPU
  # too), so short runs cannot tell 1.85x from 1.97x. The wall clock of steps 4-300 (RESULT's
  # wall_ms) and the median of the 50-step windows after step 100 are both reported.
  local gpt="--train /tmp/shard.bin --model d12 --batch 16 --seq 1024 --steps 300 --log-every 50"
  $G $gpt >"$logs/gpt2-1.log" 2>&1
  local w1 m1
  w1=$(grep -o 'wall_ms=[0-9.]*' "$logs/gpt2-1.log" | cut -d= -f2)
  m1=$(late_windows "$logs/gpt2-1.log")
  row "gpt2-124M B16 T1024, 1 GPU: wall ${w1:-?} ms/step, $(awk -v w="${w1:-0}" 'BEGIN { if (w > 0) printf "%.0f", 16384 / w * 1000 }') tok/s; windows after step 100: median ${m1:-?} ms"
  for variant in "f32:" "bf16:--grad-reduce bf16" "zero1:--zero 1" "zero1-bf16:--zero 1 --grad-reduce bf16" "zero2:--zero 2"; do
    local name=${variant%%:*} extra=${variant#*:}
    FT_RUN_ID=scale-$name MASTER_PORT=$(next_port) scripts/launch.sh $N $G $gpt $extra >"$logs/gpt2-$N-$name.log" 2>&1
    local w m
    w=$(grep -o 'wall_ms=[0-9.]*' "$logs/gpt2-$N-$name.log" | cut -d= -f2)
    m=$(late_windows "$logs/gpt2-$N-$name.log")
    row "gpt2-124M on $N GPUs, $name: wall ${w:-?} ms/step, $(awk -v w="${w:-0}" -v n=$N -v w1="${w1:-0}" 'BEGIN { if (w > 0) printf "%.0f tok/s, scaling %.3fx", n * 16384 / w * 1000, n * w1 / w }'); windows after step 100: median ${m:-?} ms, $(awk -v m="${m:-0}" -v n=$N -v m1="${m1:-0}" 'BEGIN { if (m > 0) printf "scaling %.3fx", n * m1 / m }')"
    grep -h "optimizer state\|gradient reduction in the last step" "$logs/gpt2-$N-$name.log" >>"$summary"
  done
  phase "reduction alone"
  FT_RUN_ID=bench MASTER_PORT=$(next_port) scripts/launch.sh $N $B/tests/ft-comm-check --device cuda --bench-mb 475 \
    >"$logs/allreduce.log" 2>&1
  grep -h '^RESULT allreduce' "$logs/allreduce.log" >>"$summary"
  phase "DDP peer"
  python3 bench/peers/ddp_gpt2.py >"$logs/ddp-1.log" 2>&1
  torchrun --standalone --nproc_per_node $N bench/peers/ddp_gpt2.py >"$logs/ddp-$N.log" 2>&1
  local d1 dn
  d1=$(grep -o 'ms=[0-9.]*' "$logs/ddp-1.log" | head -1 | cut -d= -f2)
  dn=$(grep -o 'ms=[0-9.]*' "$logs/ddp-$N.log" | head -1 | cut -d= -f2)
  row "PyTorch DDP eager: 1 GPU ${d1:-?} ms, $N GPUs ${dn:-?} ms, scaling $(awk -v a="${d1:-0}" -v b="${dn:-0}" -v n=$N 'BEGIN { if (b > 0) printf "%.3fx", n * a / b }')"

  phase "bf16 reduction, 500 steps"
  local curve="--train /tmp/corpus.txt --format text --model d12 --batch 8 --seq 1024 --steps 500 --log-every 10 --lr 1e-3"
  for wire in f32 bf16; do
    FT_RUN_ID=curve-$wire MASTER_PORT=$(next_port) scripts/launch.sh $N $G $curve --grad-reduce $wire \
      --metrics $logs/curve-$wire.jsonl >"$logs/curve-$wire.log" 2>&1
  done
  row "500-step loss, bf16 against f32 reduction: $(python3 - "$logs/curve-f32.jsonl" "$logs/curve-bf16.jsonl" <<'PY'
import json, sys
def losses(p):
    try:
        return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(p) if '"loss"' in l}
    except OSError:
        return {}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(a) & set(b))
if not common:
    print("FAIL: no losses")
else:
    tail = [s for s in common if s > common[-1] - 100]
    ma, mb = sum(a[s] for s in tail) / len(tail), sum(b[s] for s in tail) / len(tail)
    d = max(abs(a[s] - b[s]) for s in common)
    print(f"{len(common)} points, last 100 steps mean f32 {ma:.4f} bf16 {mb:.4f} ({(mb - ma) / ma * 100:+.2f}%), largest gap {d:.4f}")
PY
)"

  phase "mlp and dlrm"
  local mlp="--data-dir data/fashion-mnist --steps 200 --log-every 50 --dropout 0 --seed 1"
  $B/examples/ft-mlp $mlp --batch $((N * 256)) >"$logs/mlp-1.log" 2>&1
  FT_RUN_ID=mlp MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-mlp $mlp --batch 256 >"$logs/mlp-$N.log" 2>&1
  row "ft-mlp, 200 steps of $((N * 256)): 1 process $(grep -o 'final.*\|test_accuracy=[0-9.]*\|wall_ms=[0-9.]*' "$logs/mlp-1.log" | tr '\n' ' ')| $N ranks $(grep -o 'test_accuracy=[0-9.]*\|wall_ms=[0-9.]*' "$logs/mlp-$N.log" | tr '\n' ' ')"
  rm -f /tmp/dlrm.tsv
  $B/examples/ft-dlrm --make-synthetic /tmp/dlrm.tsv --rows 2000000 --table-rows 100000 >"$logs/dlrm-data.log" 2>&1
  local dlrm="--data /tmp/dlrm.tsv --preset bench --table-rows 100000 --log-every 50 --steps 200"
  $B/examples/ft-dlrm $dlrm --batch $((N * 8192)) >"$logs/dlrm-1.log" 2>&1
  FT_RUN_ID=dlrm MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm $dlrm --batch 8192 \
    >"$logs/dlrm-$N.log" 2>&1
  row "ft-dlrm, 200 steps of $((N * 8192)): 1 process $(grep -o 'samples_per_s=[0-9.]*\|test_auc=[0-9.]*\|log_loss=[0-9.]*' "$logs/dlrm-1.log" | tr '\n' ' ')| $N ranks $(grep -o 'samples_per_s=[0-9.]*\|test_auc=[0-9.]*\|log_loss=[0-9.]*' "$logs/dlrm-$N.log" | tr '\n' ' ')"
}

# ---- sharded: DLRM tables spread over the GPUs (issue 49) ----
sharded() {
  phase "sharded tables"
  for plan in table row "r,d,1,0,d,r"; do
    FT_RUN_ID=shard-check MASTER_PORT=$(next_port) scripts/launch.sh $N $B/tests/ft-sharded-tables-check --device cuda \
      --plan $plan --update adagrad >"$logs/sharded-check.log" 2>&1
    row "ft-sharded-tables-check --plan $plan on $N GPUs: $(grep -o 'rank 0 of.*\|DIFFER.*\|error.*' "$logs/sharded-check.log" | head -1)"
  done
  rm -f /tmp/dlrm-mlperf.tsv
  $B/examples/ft-dlrm --make-synthetic /tmp/dlrm-mlperf.tsv --rows 4000000 --table-rows 1000000 \
    >"$logs/dlrm-mlperf-data.log" 2>&1
  local dlrm="--data /tmp/dlrm-mlperf.tsv --preset mlperf --log-every 20 --steps 100"
  $B/examples/ft-dlrm $dlrm >"$logs/dlrm-mlperf-1.log" 2>&1
  local s1
  s1=$(grep -o 'samples_per_s=[0-9.]*' "$logs/dlrm-mlperf-1.log" | cut -d= -f2)
  row "ft-dlrm mlperf preset, 1 GPU: ${s1:-?} samples/s $(grep -o 'test_auc=[0-9.]*' "$logs/dlrm-mlperf-1.log")"
  for plan in replicated auto table row; do
    FT_RUN_ID=dlrm-$plan MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm $dlrm --sharding $plan \
      >"$logs/dlrm-mlperf-$N-$plan.log" 2>&1
    local sn
    sn=$(grep -o 'samples_per_s=[0-9.]*' "$logs/dlrm-mlperf-$N-$plan.log" | cut -d= -f2)
    row "ft-dlrm mlperf preset, $N GPUs, --sharding $plan: ${sn:-?} samples/s, $(awk -v a="${s1:-0}" -v b="${sn:-0}" 'BEGIN { if (a > 0) printf "%.2fx one GPU", b / a }') $(grep -o 'test_auc=[0-9.]*\|error.*' "$logs/dlrm-mlperf-$N-$plan.log" | head -1)"
    # The all-to-all time per step and how much of it the computation did not wait for.
    grep -h "in the last step" "$logs/dlrm-mlperf-$N-$plan.log" | sed "s/^/  $plan: /" >>"$summary"
  done
  # A sharded checkpoint resumed on one GPU (whole tables): the same test AUC as the straight run.
  local ck=/tmp/dlrm-shard-ck small="--data /tmp/dlrm-mlperf.tsv --preset bench --table-rows 100000 --log-every 20"
  rm -rf $ck
  FT_RUN_ID=dlrm-ck MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm $small --batch 4096 --steps 40 \
    --sharding auto --ckpt-dir $ck >"$logs/dlrm-shard-ck.log" 2>&1
  FT_RUN_ID=dlrm-ck2 MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm $small --batch 4096 --steps 20 \
    --sharding auto --ckpt-dir $ck.half >"$logs/dlrm-shard-half.log" 2>&1
  $B/examples/ft-dlrm $small --batch $((N * 4096)) --steps 40 --resume $ck.half >"$logs/dlrm-shard-resumed.log" 2>&1
  row "sharded checkpoint at step 20 resumed on 1 GPU: straight $(grep -o 'test_auc=[0-9.]*' "$logs/dlrm-shard-ck.log"), resumed $(grep -o 'test_auc=[0-9.]*\|error.*' "$logs/dlrm-shard-resumed.log" | head -1)"
  rm -rf $ck $ck.half
  # Row-wise tables step by step against the replicated run (forward sums are exact: each id's
  # row lives on one rank), with the graph and without.
  local steps="--data /tmp/dlrm-mlperf.tsv --preset mlperf --log-every 1 --steps 30"
  for v in "replicated:" "row:" "row-eager:--graph 0"; do
    local plan=${v%%:*}
    FT_RUN_ID=dlrm-steps-$plan MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm $steps \
      --sharding ${plan%-eager} ${v#*:} --metrics $logs/steps-$plan.jsonl >"$logs/steps-$plan.log" 2>&1
  done
  row "mlperf preset, 30 steps' losses on $N GPUs: $(python3 - "$logs"/steps-{replicated,row,row-eager}.jsonl <<'PY'
import json, sys
def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
    except OSError:
        return []
ref = losses(sys.argv[1])
for path, name in zip(sys.argv[2:], ("row", "row without the graph")):
    got = losses(path)
    first = next((i + 1 for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)
    print(f"{name}: {len(got)} losses, " + (f"first differs at step {first} ({got[first - 1]:.6f} vs {ref[first - 1]:.6f})" if first else "all equal to replicated's") + ";", end=" ")
PY
)"
  # The Criteo 1TB layout: synthetic day files of its shape (ids over the tables' whole ranges),
  # element-wise Adagrad on the tables (192 GB with its state, more than one H200 holds), then
  # row-wise Adagrad and the DCNv2 interaction.
  rm -rf /tmp/days
  $B/examples/ft-dlrm --make-synthetic /tmp/days --days 3 --rows 1500000 --preset criteo1tb >"$logs/days.log" 2>&1
  for v in "elementwise-adagrad:dot" "adagrad:dot" "adagrad:dcn"; do
    local opt=${v%%:*} inter=${v#*:}
    FT_RUN_ID=tb-$opt-$inter MASTER_PORT=$(next_port) scripts/launch.sh $N $B/examples/ft-dlrm --data '/tmp/days/day_*' \
      --preset criteo1tb --sharding auto --sparse-optimizer $opt --interaction $inter --steps 20 --log-every 5 \
      >"$logs/criteo1tb-$opt-$inter.log" 2>&1
    row "criteo1tb on $N GPUs, $opt, $inter: $(grep -o 'samples_per_s=[0-9.]*\|median_ms=[0-9.]*\|test_auc=[0-9.]*\|error.*' "$logs/criteo1tb-$opt-$inter.log" | head -4 | tr '\n' ' ')"
    grep -h "rank [0-9]*: tables\|in the last step" "$logs/criteo1tb-$opt-$inter.log" | sed "s/^/  /" >>"$summary"
  done
  rm -rf /tmp/days
}

# ---- tune: A/B runs of the gpt2-124M step on 1 and N GPUs, one pair a variant ----
# TUNE="name:ENV=V ...:extra flags;..." picks the variants (default: graph and eager, each with
# the 25 MB buckets and with one bucket, which leaves the reduction nothing to hide behind).
tune() {
  phase "tune"
  local gpt="--train /tmp/shard.bin --model d12 --batch 16 --seq 1024 --steps 150 --log-every 50"
  local variants=${TUNE:-"graph::;graph-onebucket::--bucket-mb 2000;eager::--graph 0;eager-onebucket::--graph 0 --bucket-mb 2000"}
  IFS=';' read -ra list <<<"$variants"
  for variant in "${list[@]}"; do
    local name=${variant%%:*} rest=${variant#*:}
    local envs=${rest%%:*} extra=${rest#*:}
    env $envs $G $gpt $extra >"$logs/tune-$name-1.log" 2>&1
    env $envs FT_RUN_ID=tune-$name MASTER_PORT=$(next_port) scripts/launch.sh $N $G $gpt $extra \
      >"$logs/tune-$name-$N.log" 2>&1
    local w1 w
    w1=$(late_windows "$logs/tune-$name-1.log")
    w=$(late_windows "$logs/tune-$name-$N.log")
    grep -h "gradient reduction in the last step" "$logs/tune-$name-$N.log" >>"$summary"
    row "tune $name: 1 GPU ${w1:-?} ms, $N GPUs ${w:-?} ms, $(awk -v w="${w:-0}" -v n=$N -v w1="${w1:-0}" 'BEGIN { if (w > 0) printf "scaling %.3fx, +%.2f ms", n * w1 / w, w - w1 }')"
  done
}

case $suite in
  tune) tune ;;
  functional) functional ;;
  scaling) scaling ;;
  sharded) sharded ;;
  all) functional && scaling && sharded ;;
  *) echo "multigpu: unknown part '$suite' (functional, scaling, sharded, tune, all)"; exit 2 ;;
esac
