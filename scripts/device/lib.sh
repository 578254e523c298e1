# What scripts/device/run.sh and its suites (suites/<name>.sh) share: where the build and the logs
# go, progress lines, and the summary table the run prints last. Sourced, never run.
# A suite runs in a subshell with these set: $B (the build), $logs (its own log folder, shipped
# back in $OUT/logs.tgz), $summary (the table), $data (Fashion-MNIST), $SUITE_ARG (after a colon:
# run.sh multigpu:scaling), and the functions below.
B=build-device
out=${OUT:-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
data=data/fashion-mnist
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
t0=$(date +%s)

# A progress line with the seconds since the run began.
phase() { echo "[$(($(date +%s) - t0)) s] $*"; }
# A line of the summary table, echoed as it is written (a call cut short still returns the table).
row() { echo "$*" | tee -a "$summary"; }
gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader | head -1; }
# A figure for the benchmark page (scripts/device/benchmark_page.py builds docs/benchmarks.md's
# latest-run tables from $OUT/records.tsv): record WORKLOAD RUN MS [NOTE]. The first run recorded
# for a workload is ours, the one the others are divided by; an empty MS (a run that failed) is
# left out.
record() {
  [ -n "${3:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" "$(gpu_name)" "$(date -u +%F)" >>"$out/records.tsv"
}
gpu_count() { nvidia-smi -L | wc -l; }
# GoogleTest's closing counts from a log ("[  PASSED  ] 12 tests. ...").
gtest_counts() { grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$1" | tr '\n' ' '; }
# The value of key=value on a RESULT line: result_value key file [line-pattern].
result_value() { grep "^RESULT${3:+.*$3}" "$2" | head -1 | sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p"; }
# Configures and builds with every core (the given targets, else all) into $B.
build() {
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFT_MLP_DATA_DIR="$PWD/$data" >"$logs/cmake.log" 2>&1 &&
    ninja -C "$B" -j "$(nproc)" "$@" >"$logs/build.log" 2>&1
}
