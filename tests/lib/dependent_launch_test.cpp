// Kernels launched early (lib/cuda/dependent_launch.cuh) must still see what the kernel before
// them wrote, and must not overwrite what it is still reading. The chain alternates an
// elementwise kernel with a tiled transpose: the first blocks of each kernel read elements that
// the last blocks of the kernel before wrote (transposed tiles), and every output comes from the
// memory pool, which hands the buffer freed a step earlier on at once. A kernel that touched
// memory before waiting would read elements its predecessor's last wave had not yet written.
// Checked against the same chain on the host, exactly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/test_util.h"

#if FT_WITH_CUDA
#include "lib/cuda/runtime.h"
#endif

namespace ft {
namespace {

TEST(DependentLaunchTest, ChainedKernelsSeeEachOthersWrites) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
#if FT_WITH_CUDA
  // On a Hopper build and GPU the launches do start early; elsewhere the chain still must hold.
  const char* setting = std::getenv("FT_DEPENDENT_LAUNCH");
  if (cuda::compute_capability() >= 90 && !(setting && std::string(setting) == "0")) {
    EXPECT_TRUE(cuda::dependent_launch_enabled());
  }
#endif
  constexpr int64_t kSide = 2048;  // 16 MB of f32, 4096 transpose tiles: many waves
  constexpr int kLinks = 24;       // even: the result is in the input's layout
  Generator gen(21);
  const Tensor x = Tensor::randn({kSide, kSide}, gen, DType::F32, kCUDA);
  Tensor y = x;
  for (int i = 0; i < kLinks; ++i) y = transpose(affine(y, 1.0, 0.5));

  const std::vector<double> start = x.to_vector(), got = y.to_vector();
  int64_t wrong = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    float v = static_cast<float>(start[i]);
    for (int k = 0; k < kLinks; ++k) v += 0.5f;
    wrong += static_cast<float>(got[i]) != v;
  }
  EXPECT_EQ(wrong, 0) << "of " << kSide * kSide << " elements";
}

}  // namespace
}  // namespace ft
