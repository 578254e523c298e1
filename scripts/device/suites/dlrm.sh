# DLRM: the DLRM ops'
# tests (and the same under compute-sanitizer memcheck), ft-dlrm's resume check on CUDA, `ft-bench dlrm` for the bench and mlperf
# presets with the PyTorch peer (eager and torch.compile) in the same run, and ft-dlrm fused
# and unfused on one synthetic Criteo file (the same AUC expected), and the mlperf preset's step with the dot
# and the DCNv2 interaction. 
filter='*EmbeddingBag*:*DotInteraction*:*Bce*:*SparseRows*:*Criteo*:*Module*:*Checkpoint*:*Gather*:*IndexPut*'
$B/tests/ft_tests --gtest_filter="$filter" >"$logs/gtest.log" 2>&1
tests=$(grep -E '^\[  (PASSED|FAILED) ' "$logs/gtest.log" | tr '\n' ' ')
# ft-dlrm on the GPU (CUDA graph on) resumes exactly from a checkpoint in its second epoch.
(cd $B && timeout 200 ctest -R 'dlrm_resume' --output-on-failure) >"$logs/resume.log" 2>&1
resume=$(grep -q '100% tests passed' "$logs/resume.log" && echo "exact (ctest dlrm_resume_is_exact on CUDA)" ||
  echo "FAILED (see resume.log)")
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/ft_tests \
  --gtest_filter='*EmbeddingBag*cuda*:*EmbeddingBagFused*:*DotInteraction*cuda*:*DotInteractionFused*:*Bce*cuda*:*BceFused*' \
  >"$logs/memcheck.log" 2>&1
memcheck=$([ $? -eq 0 ] && echo "clean" || echo "FINDINGS (see memcheck.log): $(grep -c 'Invalid\|uninitialized' "$logs/memcheck.log")")
# The interaction's warps share staged vectors through shared memory: racecheck them.
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 $B/tests/ft_tests \
  --gtest_filter='*DotInteraction*cuda*:*DotInteractionFused*' >"$logs/racecheck.log" 2>&1
racecheck=$([ $? -eq 0 ] && echo "clean" || echo "FINDINGS (see racecheck.log)")

timeout 150 $B/bench/ft-bench dlrm --preset bench --ops 0 >"$logs/bench.log" 2>&1 || tail -5 "$logs/bench.log"
timeout 150 $B/bench/ft-bench dlrm --preset mlperf --kernels fused --steps 10 >"$logs/mlperf.log" 2>&1 ||
  tail -5 "$logs/mlperf.log"
timeout 150 $B/bench/ft-bench ops --only dlrm >"$logs/ops.log" 2>&1 || tail -5 "$logs/ops.log"
(cd bench/peers && timeout 200 python3 dlrm_torch.py --preset bench) >"$logs/torch-bench.log" 2>&1 ||
  tail -5 "$logs/torch-bench.log"
(cd bench/peers && timeout 150 python3 dlrm_torch.py --preset bench --dtype bf16 --modes eager) \
  >"$logs/torch-bench-bf16.log" 2>&1 || tail -5 "$logs/torch-bench-bf16.log"

# Where the embedding bag's and the interaction's time goes, kernel by kernel (eager steps).
kernels='regex:embedding_bag|rows_update|crossing_rows|bag_rows|Radix|dot_interaction|bce_with|fill_kernel'
timeout 200 ncu --clock-control none --cache-control none --kernel-name-base demangled --kernel-name "$kernels" \
  --launch-skip 40 --launch-count 40 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  --csv --page raw $B/bench/ft-bench dlrm --kernels fused --graph 0 --ops 0 --warmup 5 --steps 5 \
  >"$logs/ncu.csv" 2>"$logs/ncu.err" || tail -3 "$logs/ncu.err"
python3 - "$logs/ncu.csv" >"$logs/ncu-table.txt" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')) if r["ID"].strip().isdigit()]
agg = collections.OrderedDict()
for r in rows:
    name = re.sub(r"^void |ft::<unnamed>::|ft::cuda::\(anonymous namespace\)::", "", r["Kernel Name"])
    name = name.split("(")[0].split("<")[0][-40:]
    a = agg.setdefault(name, [0, 0.0, 0.0])
    a[0] += 1
    a[1] += float(r["gpu__time_duration.sum"].replace(",", ""))
    a[2] += float(r["dram__bytes_read.sum"].replace(",", "")) + float(r["dram__bytes_write.sum"].replace(",", ""))
print(f"{'kernel':40s} {'calls':>5s} {'us/call':>9s} {'MB/call':>9s} {'TB/s':>6s}")
for name, (n, ns, b) in agg.items():
    print(f"{name:40s} {n:5d} {ns / n / 1e3:9.2f} {b / n / 1e6:9.2f} {b / ns / 1e3:6.2f}")
PY

syn=/tmp/ft-dlrm-syn.tsv
rm -f $syn  # --make-synthetic does not write over a file
$B/examples/ft-dlrm --make-synthetic $syn --rows 2000000 --table-rows 100000 >"$logs/synthetic.log" 2>&1
for mode in fused unfused; do
  timeout 150 $B/examples/ft-dlrm --data $syn --preset bench --table-rows 100000 --kernels $mode --log-every 50 \
    >"$logs/train-$mode.log" 2>&1 || tail -5 "$logs/train-$mode.log"
done
# The mlperf preset's step with dlrm's dot interaction and with DCNv2's cross network (3 layers of
# rank 512 over 27 x 128), whole runs on the same file (data loading included in wall_ms).
for inter in dot dcn; do
  timeout 150 $B/examples/ft-dlrm --data $syn --preset mlperf --table-rows 100000 --interaction $inter --steps 60 \
    --log-every 20 >"$logs/mlperf-$inter.log" 2>&1 || tail -5 "$logs/mlperf-$inter.log"
done

{
echo
echo "== fusedtrain DLRM device check ($(date -u +%F), $(gpu_name)) =="
echo "tests: $tests"
echo "memcheck (DLRM ops' GPU tests): $memcheck"
echo "racecheck (interaction tests): $racecheck"
echo "resume: $resume"
echo
sed -n '/^kernels/,$p' "$logs/bench.log"
sed -n '/^ops at/,$p' "$logs/ops.log"
grep '^RESULT' "$logs/mlperf.log"
grep -E '^RESULT' "$logs/torch-bench.log" "$logs/torch-bench-bf16.log" | sed 's/^.*RESULT /peer: /'
ours=$(sed -n 's/^RESULT dlrm preset=bench kernels=fused graph=1 ms=\([0-9.]*\).*/\1/p' "$logs/bench.log")
peer=$(sed -n 's/^RESULT .*eager_ms=\([0-9.]*\).*/\1/p' "$logs/torch-bench.log")
record "dlrm-kaggle B8192" "fusedtrain, fused" "$ours"
record "dlrm-kaggle B8192" "fusedtrain, unfused" "$(sed -n 's/^RESULT dlrm preset=bench kernels=unfused graph=1 ms=\([0-9.]*\).*/\1/p' "$logs/bench.log")"
record "dlrm-kaggle B8192" "PyTorch eager, f32" "$peer"
record "dlrm-kaggle B8192" "PyTorch eager, bf16" "$(sed -n 's/^RESULT .*eager_ms=\([0-9.]*\).*/\1/p' "$logs/torch-bench-bf16.log")"
record "dlrm-mlperf" "fusedtrain, fused" "$(sed -n 's/^RESULT dlrm preset=mlperf kernels=fused graph=1 ms=\([0-9.]*\).*/\1/p' "$logs/mlperf.log")"
[ -n "$ours" ] && [ -n "$peer" ] &&
  awk -v o="$ours" -v p="$peer" 'BEGIN { printf "dlrm-kaggle: torch eager %.3f ms, ours %.3f ms, torch / ours %.2fx\n", p, o, p / o }'
echo
echo "-- embedding bag / interaction kernels (ncu, eager fused steps)"
cat "$logs/ncu-table.txt"
echo
grep 'wrote' "$logs/synthetic.log"
for mode in fused unfused; do grep '^RESULT' "$logs/train-$mode.log"; done
for inter in dot dcn; do echo "mlperf preset, --interaction $inter: $(grep -o '^RESULT.*\|error.*' "$logs/mlperf-$inter.log" | head -1)"; done
} | tee -a "$summary"
