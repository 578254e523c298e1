// attention (today the twin on every device) against loops in f64: the scaled scores, the causal
// mask, the softmax, the Philox dropout on the probabilities, and every gradient.
#include <cmath>
#include <vector>

#include "lib/ops/attention.h"
#include "lib/ops/random.h"
#include "lib/philox.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

// out[b,h,i,:] = Σ_j keep·p_ij/(1-p) v[b,h,j,:], p = softmax_j(q_i·k_j/√HS) over visible j.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double drop,
                              uint64_t seed, uint64_t offset) {
  const int64_t b = q.size(0), nh = q.size(1), t = q.size(2), hs = q.size(3);
  const std::vector<double> vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  std::vector<double> out(vq.size(), 0.0);
  for (int64_t bh = 0; bh < b * nh; ++bh)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> p(static_cast<size_t>(t), 0.0);
      double mx = -INFINITY, total = 0.0;
      for (int64_t j = 0; j < t; ++j) {
        if (causal && j > i) continue;
        double s = 0.0;
        for (int64_t d = 0; d < hs; ++d) s += vq[static_cast<size_t>((bh * t + i) * hs + d)] * vk[static_cast<size_t>((bh * t + j) * hs + d)];
        p[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(hs));
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < t; ++j) {
        if (causal && j > i) {
          p[static_cast<size_t>(j)] = 0.0;
          continue;
        }
        p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
        total += p[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < t; ++j) {
        double w = p[static_cast<size_t>(j)] / total;
        if (drop > 0.0) {
          const uint64_t index = static_cast<uint64_t>((bh * t + i) * t + j);
          w = philox::uniform(seed, offset, index) >= static_cast<float>(drop) ? w / (1.0 - drop) : 0.0;
        }
        for (int64_t d = 0; d < hs; ++d)
          out[static_cast<size_t>((bh * t + i) * hs + d)] += w * vv[static_cast<size_t>((bh * t + j) * hs + d)];
      }
    }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(AttentionTest, MatchesLoopsInF64) {
  Generator gen = test_generator();
  for (bool causal : {false, true}) {
    for (const Shape& s : {Shape{1, 1, 1, 4}, Shape{2, 3, 5, 4}, Shape{1, 2, 9, 7}}) {
      SCOPED_TRACE(shape_str(s) + (causal ? " causal" : ""));
      const Tensor q = random_tensor(s, DType::F64, kCPU, gen), k = random_tensor(s, DType::F64, kCPU, gen),
                   v = random_tensor(s, DType::F64, kCPU, gen);
      EXPECT_LT(max_abs_diff(attention(q, k, v, causal).to_vector(), reference(q, k, v, causal, 0.0, 0, 0)), 1e-12);
    }
  }
}

TEST(AttentionTest, DropoutFollowsThePhiloxContract) {
  Generator gen = test_generator();
  const Shape s{2, 2, 6, 4};
  const Tensor q = random_tensor(s, DType::F64, kCPU, gen), k = random_tensor(s, DType::F64, kCPU, gen),
               v = random_tensor(s, DType::F64, kCPU, gen);
  const uint64_t seed = test_seed(), offset = 4 * 11;
  const Tensor y = attention(q, k, v, true, 0.3, seed, philox_offset(offset, kCPU));
  EXPECT_LT(max_abs_diff(y.to_vector(), reference(q, k, v, true, 0.3, seed, offset)), 1e-12);
  EXPECT_GT(max_abs_diff(y.to_vector(), attention(q, k, v, true).to_vector()), 1e-3) << "dropout changed nothing";
}

TEST(AttentionTest, GradCheckF64) {
  Generator gen = test_generator();
  const Shape s{1, 2, 4, 3};
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    EXPECT_TRUE(gradcheck(
        [causal](const std::vector<Tensor>& in) {
          return attention(in[0], in[1], in[2], causal, 0.25, 7, philox_offset(8, kCPU));
        },
        {random_tensor(s, DType::F64, kCPU, gen), random_tensor(s, DType::F64, kCPU, gen),
         random_tensor(s, DType::F64, kCPU, gen)},
        gen));
  }
}

TEST(AttentionTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor q = random_tensor({1, 2, 4, 3}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(attention(q, random_tensor({1, 2, 5, 3}, DType::F32, kCPU, gen), q, true), "attention");
  EXPECT_FT_ERROR(attention(q, q, q.to(DType::F64), true), "attention");
  EXPECT_FT_ERROR(attention(q, q, q, true, 0.5), "offset");
  EXPECT_FT_ERROR(attention(q.reshape({2, 4, 3}), q.reshape({2, 4, 3}), q.reshape({2, 4, 3}), false), "attention");
}

class AttentionDeviceTest : public DeviceModeTest {};

TEST_P(AttentionDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (causal ? " causal" : ""));
      const Shape s{2, 3, 33, 16};
      EXPECT_TRUE(matches_f64_reference(
          [causal](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], causal); },
          {random_tensor(s, DType::F64, kCPU, gen), random_tensor(s, DType::F64, kCPU, gen),
           random_tensor(s, DType::F64, kCPU, gen)},
          device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AttentionDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

}  // namespace
}  // namespace ft
