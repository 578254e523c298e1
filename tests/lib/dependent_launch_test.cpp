// Kernels launched early (lib/cuda/dependent_launch.cuh) must still see what the kernel before
// them wrote, and must not overwrite what it is still reading: a chain of kernels, each reading
// the last one's output, through pool buffers that are freed and handed on at once (so a kernel
// that wrote before waiting would clobber its predecessor's input), against the same chain on
// the host. Also run with FT_DEPENDENT_LAUNCH=0 by hand to compare.
#include <gtest/gtest.h>

#include <vector>

#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

TEST(DependentLaunchTest, ChainedKernelsSeeEachOthersWrites) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  constexpr int64_t kElements = 1 << 23;  // 32 MB of f32: many waves, so launches overlap tails
  constexpr int kLinks = 48;
  Generator gen(21);
  const Tensor x = Tensor::randn({kElements}, gen, DType::F32, kCUDA);
  Tensor y = x;
  for (int i = 0; i < kLinks; ++i) y = affine(y, 1.0, 0.5);  // each link frees the buffer before last
  const Tensor total = sum_all(y);

  const std::vector<double> start = x.to_vector(), got = y.to_vector();
  double expected_total = 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    float v = static_cast<float>(start[i]);
    for (int k = 0; k < kLinks; ++k) v += 0.5f;
    expected_total += v;
    wrong += static_cast<float>(got[i]) != v;
  }
  EXPECT_EQ(wrong, 0) << "of " << kElements;
  EXPECT_NEAR(total.item(), expected_total, 1e-4 * kElements);
}

}  // namespace
}  // namespace ft
