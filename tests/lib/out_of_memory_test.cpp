// Out of memory is an ft::OutOfMemory that names what was being allocated, how much, what is
// free and what to try, wherever it happens: a tensor on the host or the GPU, or a captured
// graph whose own allocations do not fit at instantiation or launch. Afterwards the device is
// still usable.
#include <gtest/gtest.h>

#include <string>

#include "lib/runtime.h"
#include "lib/tensor.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// Expects `text` to contain `part`, printing the whole message when it does not.
void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

// 2^25 x 2^25 f32 elements: 4.5 PB, more than any machine has.
const Shape kHuge{int64_t{1} << 25, int64_t{1} << 25};

TEST(OutOfMemoryTest, HostTensorNamesItsShapeAndSize) {
  try {
    Tensor::empty(kHuge, DType::F32, kCPU);
    FAIL() << "a 4.5 PB host tensor was allocated";
  } catch (const OutOfMemory& e) {
    expect_contains(e.what(), "f32 [33554432, 33554432] tensor on cpu");
    expect_contains(e.what(), "out of host memory allocating 4503599.63 GB");
  }
}

TEST(OutOfMemoryTest, CudaTensorNamesItsShapeWhatIsFreeAndWhatToTry) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  try {
    Tensor::empty(kHuge, DType::BF16, kCUDA);
    FAIL() << "a 2.25 PB CUDA tensor was allocated";
  } catch (const OutOfMemory& e) {
    expect_contains(e.what(), "bf16 [33554432, 33554432] tensor on cuda");
    expect_contains(e.what(), "CUDA out of memory allocating 2251799.81 GB");
    expect_contains(e.what(), "GB free of");
    expect_contains(e.what(), "try a smaller --batch");
  }
  // The failure left nothing behind: the next allocation and kernel work.
  Tensor t = Tensor::full({1000}, 2.5, DType::F32, kCUDA);
  EXPECT_EQ(fresh_copy(t, DType::F64, kCPU).data<double>()[999], 2.5);
}

// Two live buffers of 60% of the device's memory each: each allocation is fine on its own (and
// capture only records them), but the graph as a whole can never get its memory.
TEST(OutOfMemoryTest, CapturedGraphThatCannotGetItsMemoryNamesHowMuchItAllocates) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  // Known defect (docs/design-notes.md): after this failure the device stays full for the rest
  // of the process (cudaDeviceGraphMemTrim and trimming the pool did not give the memory back;
  // H100, CUDA 13.0, 2026-11-25), so the device scripts run this test in a process of its own,
  // and it checks the report only.
  const int64_t each = static_cast<int64_t>(static_cast<double>(device_memory_total()) * 0.6);
  std::string message;
  try {
    CapturedGraph graph([&] {
      Tensor a = Tensor::empty({each}, DType::U8, kCUDA);
      Tensor b = Tensor::empty({each}, DType::U8, kCUDA);
      a.fill_(1.0);
      b.fill_(2.0);
    });
    EXPECT_GE(graph.allocated_bytes(), static_cast<size_t>(2 * each));
    graph.replay();
    synchronize();
    FAIL() << "a graph allocating 120% of the device's memory was launched";
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  expect_contains(message, "the captured step: its graph allocates up to");
  expect_contains(message, "--graph 0");
}

}  // namespace
}  // namespace ft
