# The GoogleTest suite on the GPU, as one ft_tests process (ctest's process per test, each with an
# OpenMP team over every core, makes the CPU cases crawl here). The CPU instantiations of the
# device tests (*/cpu_*) and the CPU end-to-end trainings are CI's and are not run here.
# OutOfMemoryTest's captured-graph cases run in a process of their own: they leave the pool full.
# tests:PATTERN runs only the tests GoogleTest's filter PATTERN names (for example
# 'GroupedAttention*:Llama*'), still without the CPU instantiations.
if [ -n "${SUITE_ARG:-}" ]; then
  $B/tests/ft_tests --gtest_filter="$SUITE_ARG-*/cpu_*" >"$logs/gtest.log" 2>&1
else
  $B/tests/ft_tests --gtest_filter='-*/cpu_*:OutOfMemoryTest.CapturedGraph*' >"$logs/gtest.log" 2>&1 &&
    $B/tests/ft_tests --gtest_filter='OutOfMemoryTest.CapturedGraph*' >>"$logs/gtest.log" 2>&1
fi
test_rc=$?
[ $test_rc -eq 0 ] || grep -E "^\[  FAILED" "$logs/gtest.log" | head -40
row "gtest on the GPU: $(gtest_counts "$logs/gtest.log")"
exit $test_rc
