// The device memory's peak when a step is captured: the eager steps before the capture and the
// replays after it each hold their own activations, never both at once, so peak_memory() is the
// larger of the two, and the capture first gives the eager steps' cached blocks back to the
// device (release_cached_memory_for_capture, which GraphedStep calls).
#include <gtest/gtest.h>

#include <cstdint>

#include "lib/runtime.h"
#include "lib/tensor.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

TEST(DeviceMemoryTest, APeakBeforeTheCaptureAndOneInTheReplaysCountOnceNotTogether) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  constexpr int64_t kElements = int64_t{256} << 20;  // 1 GiB of f32
  constexpr double kGiB = double(int64_t{1} << 30);
  reset_peak_memory();
  const double base = static_cast<double>(device_memory_in_use());
  {
    Tensor eager = Tensor::full({kElements}, 1.0, DType::F32, kCUDA);  // an eager step's activations
  }
  EXPECT_GE(static_cast<double>(peak_memory()), base + kGiB);
  release_cached_memory_for_capture();
  EXPECT_GE(static_cast<double>(peak_memory()), base + kGiB) << "the eager peak was forgotten";
  CapturedGraph graph([&] {
    Tensor replayed = Tensor::full({kElements}, 2.0, DType::F32, kCUDA);  // the graph's own memory
  });
  graph.replay();
  synchronize();
  const double peak = static_cast<double>(peak_memory());
  EXPECT_GE(peak, base + kGiB);
  EXPECT_LT(peak, base + 1.5 * kGiB) << "the eager and the captured peaks were added";
}

}  // namespace
}  // namespace ft
