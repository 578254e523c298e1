# The GPU test suite under compute-sanitizer's tools
# (memcheck, initcheck, racecheck, synccheck) and print a table of what each found, the
# findings in the project's own kernels apart from those inside NVIDIA's libraries (cuBLAS's
# nvjet and cutlass kernels, CUB's). Exits 1 when a tool found something in the project's code,
# a test failed under a tool, or a tool did not get through its tests.
#
# Each tool runs over SHARDS gtest shards (GTEST_SHARD_INDEX) at once, on the one GPU; the tools
# run one after another. More at once does not fit: each sanitized process keeps gigabytes of
# device memory for its bookkeeping, and 16 of them (4 tools x 4 shards) left the H100 with none
# (tests failed creating a stream). The OutOfMemoryTest cases, which ask for more memory than
# the device has on purpose, run alone after the shards.
#
#   TOOLS="memcheck initcheck"   the tools to run (default: all four)
#   SHARDS=4                     processes per tool
#   SAN_BUDGET_S=420             seconds each process may run (a shard cut short is reported)
#   FILTER='-*/cpu_*'            gtest filter (default: every GPU case; the CPU ones are CI's)
#   TESTS_FILE=list.txt          instead of FILTER: the cases named in the file, one a line (the
#                                ones an earlier, cut-short call did not reach)
#   SOLO='A.b:C.d'               cases that each get a process of their own beside the shards:
#                                the slow ones (a twin AdamW over 20 steps, 36k launches, takes
#                                longer under racecheck than a whole shard), so no shard waits on them
#   PROJECT_KERNELS_ONLY=1       instrument only the project's kernels (mangled names starting
#                                _ZN2ft): cuBLAS's nvjet kernels run at full speed instead of
#                                10-50x slower, and their reports (listed apart anyway) go unseen;
#                                initcheck still instruments every kernel (it must see every write)
#
# First, tests/sanitizer/bulk_copy_probe.cu shows whether initcheck sees writes made by the bulk
# copy engine (the attention backward's dQ sums) and cuBLAS's TMA stores. It does not (2025.3,
# even with --check-bulk-copy), and it reports every later read of such memory, millions of
# them, which slowed some shards to 21 tests in 380 s. So initcheck runs with FT_INITCHECK=1,
# which clears each such output with a memset (a write it sees) just before the untracked
# write; and the suite runs once more without a tool, every new allocation filled with NaN
# (FT_FILL_UNINITIALIZED=1), which fails any result that read memory nothing wrote, those
# writers' outputs included.
#
# Logs (one per tool and shard, the tests' output interleaved with the tool's reports, so each
# report lands under the test that caused it) go to $OUT/logs.tgz.
tools=${TOOLS:-memcheck initcheck racecheck synccheck}
shards=${SHARDS:-4}
budget=${SAN_BUDGET_S:-420}
filter=${FILTER:--*/cpu_*}
if [ -n "${TESTS_FILE:-}" ]; then
  filter=$(grep -v '^ *$' "$TESTS_FILE" | paste -sd:)
fi
solo=${SOLO:-}
lone=OutOfMemoryTest.*
# The filter less the lone and solo cases (gtest: positive patterns, then '-' and the negative
# ones).
case "$filter" in
  *-*) shard_filter="$filter:$lone" ;;
  *) shard_filter="$filter-$lone" ;;
esac
[ -n "$solo" ] && shard_filter="$shard_filter:$solo"

tests=$B/tests/ft_tests
[ -x "$tests" ] || { echo "no $tests: the build failed"; exit 1; }
"$tests" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ' >"$logs/test-count.txt"

# Options this compute-sanitizer has (they vary between releases).
compute-sanitizer --version | tail -1
compute-sanitizer --help >"$logs/help.txt" 2>&1
has_option() { grep -q -- "--$1" "$logs/help.txt"; }
common=(--print-limit 200 --show-backtrace device --report-api-errors no)
for option in check-bulk-copy check-warpgroup-mma; do
  has_option "$option" && common+=("--$option" yes)
done
echo "options: ${common[*]}"

nvcc -std=c++20 -arch=sm_90a -I. tests/sanitizer/bulk_copy_probe.cu -lcublas -o $B/sanitize-bulk_copy_probe &&
  $B/sanitize-bulk_copy_probe &&
  compute-sanitizer --tool initcheck "${common[@]}" $B/sanitize-bulk_copy_probe >"$logs/probe-initcheck.txt" 2>&1
# One report per reading kernel (read_after_plain, _bulk, _cublas) and per host copy whose
# source initcheck takes for uninitialized.
probe_reads=$(grep -o "at .*read_after_[a-z]*" "$logs/probe-initcheck.txt" | grep -o "read_after_[a-z]*" | tr '\n' ' ')
probe_copies=$(grep -c "on access by cudaMemcpy" "$logs/probe-initcheck.txt")
echo "bulk copy probe under initcheck: uninitialized reads reported in: ${probe_reads:-none}; host copies from" \
  "uninitialized memory: $probe_copies (of plain, bulk and cuBLAS buffers)" | tee "$logs/probe-summary.txt"

# After the probe, whose kernels are not the project's. Not for initcheck: it does not see what
# uninstrumented kernels write, so a project kernel reading CUB's sorted keys (the embedding
# backward's token_runs_kernel) was reported as reading uninitialized memory (2026-11-25).
project_only=()
[ "${PROJECT_KERNELS_ONLY:-0}" = 1 ] && project_only=(--kernel-name kns=_ZN2ft) &&
  echo "only kernels named _ZN2ft* are checked (initcheck: every kernel, to see every write)"

# Tool options: reports go to the test's own output (no --log-file), with device backtraces only
# (host frames would dwarf the logs); API errors the tests provoke on purpose (out of memory,
# say) are not findings.
declare -A extra=([memcheck]="--padding 64" [initcheck]="" [racecheck]="" [synccheck]="")

# Initcheck's blind spot is covered by running the suite once more without a tool, every new
# allocation filled with NaN (-1 in integers): a result that read memory nothing wrote fails.
FT_FILL_UNINITIALIZED=1 "$tests" --gtest_filter="$shard_filter" >"$logs/nan-filled.txt" 2>&1 &
nan_filled=$!

# The tests take their sanitizer sizes (fewer optimizer steps; tests/lib/test_util.h).
export FT_UNDER_SANITIZER=1
# sanitized TOOL LOG FILTER: the suite's FILTER cases under TOOL, within the budget, into LOG
# (the shard variables, when set, pick the shard). Initcheck gets FT_INITCHECK=1 (above).
sanitized() {
  local only=("${project_only[@]}")
  [ "$1" = initcheck ] && only=()
  # shellcheck disable=SC2086
  FT_INITCHECK=$([ "$1" = initcheck ] && echo 1 || echo 0) timeout -k 10 "$budget" \
    compute-sanitizer --tool "$1" "${common[@]}" "${only[@]}" ${extra[$1]} "$tests" --gtest_filter="$3" >"$2" 2>&1
}
IFS=: read -ra solo_cases <<<"$solo"
for tool in $tools; do
  start=$(date +%s)
  pids=()
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i sanitized "$tool" "$logs/$tool-$i.log" "$shard_filter" &
    pids+=($!)
  done
  for ((i = 0; i < ${#solo_cases[@]}; i++)); do
    sanitized "$tool" "$logs/$tool-solo$i.log" "${solo_cases[$i]}" &
    pids+=($!)
  done
  wait "${pids[@]}"
  # The lone cases, when the filter takes them in.
  if "$tests" --gtest_filter="$filter" --gtest_list_tests | grep -q '^OutOfMemoryTest\.'; then
    sanitized "$tool" "$logs/$tool-$shards.log" "$lone"
  fi
  echo "$tool done in $(($(date +%s) - start)) s"
done
wait "$nan_filled"
nan_rc=$?
nan_line="suite with new memory filled with NaN (FT_FILL_UNINITIALIZED=1, no tool): $(grep -E '^\[  (PASSED|FAILED) ' \
  "$logs/nan-filled.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] .*ms\)' "$logs/nan-filled.txt" | head -20
{
  cat "$logs/probe-summary.txt"
  echo "$nan_line"
  python3 scripts/sanitizer_summary.py "$logs" "$(cat "$logs/test-count.txt")"
} | tee -a "$summary"
summary_rc=${PIPESTATUS[1]}
[ "$nan_rc" -eq 0 ] && exit "$summary_rc"
echo "RESULT nan_filled=FAILED"
exit 1
