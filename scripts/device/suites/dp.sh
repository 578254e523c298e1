# Data parallelism at world size 1 on NCCL: the GPU gtest suite (with the data-parallel tests on NCCL at world size 1: bucket order,
# ZeRO-1 against the plain step), every NCCL collective against local sums (ft-comm-check),
# ft-gpt2 launched data-parallel with ZeRO-1 on a small model (graph, checkpoint, resume), ft-dlrm
# with and without data parallelism, and
# sharded DLRM tables through NCCL to itself, ft-bench gpt2 --data-parallel 1: the gpt2-124M step data-parallel (buckets averaged during
# backward, inside the CUDA graph), plain and ZeRO-1, against the same step without. The short table goes into the summary.
# The whole GPU suite (the optimizers now update pieces of buckets; the CPU cases are CI's).
# OutOfMemoryTest's captured-graph cases leave the pool full: the tests suite runs them apart.
$B/tests/ft_tests --gtest_filter='-*/cpu_*:*/cpu:OutOfMemoryTest.CapturedGraph*' >"$logs/gtest.log" 2>&1
gtest=$(grep -E "^\[  (PASSED|FAILED) +\] [0-9]+ test" "$logs/gtest.log" | tr '\n' ' ')
grep -E "^\[  FAILED" "$logs/gtest.log" | head -20

FT_RUN_ID=comm timeout 120 scripts/launch.sh 1 $B/tests/ft-comm-check --device cuda >"$logs/comm.log" 2>&1
comm=$(grep -o "all collectives match.*\|FAIL.*\|error.*" "$logs/comm.log" | head -1)
# A peer that never starts: rank 0 of 2 alone must stop with the error after its 5 s timeout.
start=$(date +%s.%N)
RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 timeout 60 $B/tests/ft-comm-check --device cuda \
  --comm-timeout-ms 5000 >"$logs/missing-peer.log" 2>&1
missing="exit $? after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s: $(grep -o 'error.*' "$logs/missing-peer.log" | head -1)"

# ft-gpt2 on NCCL at world size 1 with ZeRO-1 and the graph: 30 steps with a checkpoint at 20,
# then a run resumed from it must log the same losses for steps 21-30.
FT_RUN_ID=g1 timeout 200 tests/train/resume_check.sh scripts/launch.sh /tmp/dp-resume 1 $B/examples/ft-gpt2 \
  --train 'tests/data/text/*.txt' --format text --model d6 --batch 8 --seq 128 --device cuda --zero 1 --data-parallel on \
  >"$logs/gpt2-zero1-resume.log" 2>&1
resume=$([ $? -eq 0 ] && echo "exact (steps 21-30 identical)" || echo "FAILED (see gpt2-zero1-resume.log)")
cp /tmp/dp-resume/*.log "$logs/" 2>/dev/null

# ft-dlrm (dlrm-kaggle shapes, graph on) without and with data parallelism at world size 1: the
# dense MLPs' buckets and the tables' bag exchange inside the graph.
syn=/tmp/ft-dlrm-syn.tsv
rm -f $syn  # --make-synthetic does not write over a file
$B/examples/ft-dlrm --make-synthetic $syn --rows 1000000 --table-rows 100000 >"$logs/synthetic.log" 2>&1
for dp in auto on; do
  FT_RUN_ID=dlrm-$dp timeout 120 $B/examples/ft-dlrm --data $syn --preset bench --table-rows 100000 --log-every 50 \
    --data-parallel $dp >"$logs/dlrm-dp-$dp.log" 2>&1 || tail -5 "$logs/dlrm-dp-$dp.log"
done

# Sharded tables on one GPU (--data-parallel on: their all-to-alls, all-gathers and
# reduce-scatters go to the rank itself through NCCL, inside the graph): ft-sharded-tables-check
# against whole tables, and ft-dlrm with its tables placed whole on the rank, or row-wise.
for plan in table row; do
  FT_RUN_ID=shard-$plan timeout 60 scripts/launch.sh 1 $B/tests/ft-sharded-tables-check --device cuda --plan $plan \
    --update adagrad >"$logs/sharded-check-$plan.log" 2>&1
  FT_RUN_ID=dlrm-shard-$plan timeout 120 $B/examples/ft-dlrm --data $syn --preset bench --table-rows 100000 \
    --log-every 50 --data-parallel on --sharding $plan >"$logs/dlrm-sharded-$plan.log" 2>&1 ||
    tail -5 "$logs/dlrm-sharded-$plan.log"
done

timeout 300 $B/bench/ft-bench gpt2 --graph 1 --kernels fused --data-parallel 1 --steps 20 \
  >"$logs/bench-gpt2-dp.log" 2>&1 || tail -5 "$logs/bench-gpt2-dp.log"

{
echo
echo "== fusedtrain data-parallel device check ($(date -u +%F), $(gpu_name)) =="
echo "gtest: $gtest"
echo "ft-comm-check (NCCL, world size 1): $comm"
grep -h "^timing:" "$logs/comm.log" | sed 's/^/  /'
echo "rank 0 of 2 without its peer: $missing"
grep -h "data parallel over" "$logs/whole.log" | head -1
echo "ft-gpt2 --zero 1, resumed at step 20: $resume"
for dp in auto on; do
  echo "ft-dlrm --data-parallel $dp: $(grep -o 'median_ms=[^ ]*\|test_auc=[^ ]*' "$logs/dlrm-dp-$dp.log" | tr '\n' ' ')"
done
for plan in table row; do
  echo "ft-sharded-tables-check --plan $plan (CUDA, world 1): $(grep -o 'MATCH.*\|DIFFER.*\|error.*' "$logs/sharded-check-$plan.log" | head -1)"
  # At one rank the sharded tables hold and update what the replicated ones do: the same AUC.
  same=$([ -n "$(grep -o 'test_auc=[^ ]*' "$logs/dlrm-sharded-$plan.log")" ] &&
    [ "$(grep -o 'test_auc=[^ ]*' "$logs/dlrm-sharded-$plan.log")" = "$(grep -o 'test_auc=[^ ]*' "$logs/dlrm-dp-on.log")" ] &&
    echo "the replicated run's AUC" || echo "AUC DIFFERS from the replicated run's")
  echo "ft-dlrm --data-parallel on --sharding $plan: $(grep -o 'median_ms=[^ ]*\|test_auc=[^ ]*\|error.*' "$logs/dlrm-sharded-$plan.log" | tr '\n' ' ')($same)"
  grep -h "in the last step" "$logs/dlrm-sharded-$plan.log" | sed 's/^/  /'
done
sed -n '/^kernels/,$p' "$logs/bench-gpt2-dp.log" | grep -v '^RESULT'
} | tee -a "$summary"
