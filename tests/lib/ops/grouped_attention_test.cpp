// grouped_query_attention (lib/ops/attention/attention.cpp): the twin against plain attention over key and value heads repeated
// by hand (f64, with a gradient check), with RoPE against rows turned by loops, its input
// checks, and on CUDA the flash kernels (both families, both head sizes, groups of 1 to 8 query
// heads, with and without RoPE first) against the twin and the f64 reference, bit-reproducible
// from run to run.
#include <optional>
#include <string>
#include <vector>

#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/rope/rope.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/ops/flash_kernels_guard.h"

namespace ft {
namespace {

using namespace ft::test;

/// [B, T, H·HS] -> [B, H·repeat, T, HS] by loops: head h of the result is head h / repeat of x.
Tensor heads_by_loops(const Tensor& x, int64_t heads, int64_t repeat) {
  const int64_t b = x.size(0), t = x.size(1), hs = x.size(2) / heads;
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < heads * repeat; ++h)
      for (int64_t ti = 0; ti < t; ++ti)
        for (int64_t d = 0; d < hs; ++d)
          out.push_back(v[static_cast<size_t>((bi * t + ti) * heads * hs + (h / repeat) * hs + d)]);
  return Tensor::from_vector(out, {b, heads * repeat, t, hs}, DType::F64);
}

TEST(GroupedAttentionTest, TwinIsAttentionOverRepeatedHeads) {
  Generator gen = test_generator();
  const int64_t b = 2, t = 6, hs = 4;
  for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {6, 1}, {3, 3}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::to_string(heads) + "/" + std::to_string(kv_heads) + (causal ? " causal" : ""));
      const Tensor q = random_tensor({b, t, heads * hs}, DType::F64, kCPU, gen);
      const Tensor k = random_tensor({b, t, kv_heads * hs}, DType::F64, kCPU, gen);
      const Tensor v = random_tensor({b, t, kv_heads * hs}, DType::F64, kCPU, gen);
      const int64_t group = heads / kv_heads;
      const std::vector<double> by_head = attention(heads_by_loops(q, heads, 1), heads_by_loops(k, kv_heads, group),
                                                    heads_by_loops(v, kv_heads, group), causal)
                                              .to_vector();
      const std::vector<double> y = grouped_query_attention(q, k, v, heads, kv_heads, causal).to_vector();
      ASSERT_EQ(y.size(), by_head.size());
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t ti = 0; ti < t; ++ti)
            for (int64_t d = 0; d < hs; ++d)
              EXPECT_NEAR(y[static_cast<size_t>((bi * t + ti) * heads * hs + h * hs + d)],
                          by_head[static_cast<size_t>(((bi * heads + h) * t + ti) * hs + d)], 1e-12);
    }
}

/// x [B, T, H·HS] with each head's pairs (i, i + HS/2) at token t turned by t·f_i, by loops in
/// f64 from rope_frequencies.
Tensor turned_by_loops(const Tensor& x, int64_t heads, const RopeConfig& config) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hs = c / heads, half = hs / 2;
  const std::vector<double> f = rope_frequencies(hs, config), v = x.to_vector();
  std::vector<double> out(v.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const size_t at = static_cast<size_t>((bi * t + ti) * c + h * hs + i);
          const double angle = static_cast<double>(ti) * f[static_cast<size_t>(i)];
          out[at] = v[at] * std::cos(angle) - v[at + half] * std::sin(angle);
          out[at + half] = v[at + half] * std::cos(angle) + v[at] * std::sin(angle);
        }
  return Tensor::from_vector(out, x.shape(), DType::F64);
}

const RopeConfig kLlama3Rope{.theta = 500000.0, .factor = 8.0, .original_max_position = 64};

TEST(GroupedAttentionTest, RopeTurnsQueriesAndKeysFirst) {
  Generator gen = test_generator();
  const int64_t b = 2, t = 9, hs = 8, heads = 4, kv_heads = 2;
  for (const RopeConfig& config : {RopeConfig{.theta = 100.0}, kLlama3Rope}) {
    const Tensor q = random_tensor({b, t, heads * hs}, DType::F64, kCPU, gen);
    const Tensor k = random_tensor({b, t, kv_heads * hs}, DType::F64, kCPU, gen);
    const Tensor v = random_tensor({b, t, kv_heads * hs}, DType::F64, kCPU, gen);
    const std::vector<double> expected = grouped_query_attention(turned_by_loops(q, heads, config),
                                                                 turned_by_loops(k, kv_heads, config), v, heads,
                                                                 kv_heads, true)
                                             .to_vector();
    EXPECT_TRUE(all_close(grouped_query_attention(q, k, v, heads, kv_heads, true, config),
                          Tensor::from_vector(expected, q.shape(), DType::F64), 1e-12));
  }
}

TEST(GroupedAttentionTest, RopeGradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return grouped_query_attention(in[0], in[1], in[2], 4, 2, true, RopeConfig{.theta = 50.0});
      },
      {random_tensor({1, 5, 4 * 4}, DType::F64, kCPU, gen), random_tensor({1, 5, 2 * 4}, DType::F64, kCPU, gen),
       random_tensor({1, 5, 2 * 4}, DType::F64, kCPU, gen)},
      gen));
}

TEST(GroupedAttentionTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return grouped_query_attention(in[0], in[1], in[2], 4, 2, true); },
      {random_tensor({1, 4, 4 * 3}, DType::F64, kCPU, gen), random_tensor({1, 4, 2 * 3}, DType::F64, kCPU, gen),
       random_tensor({1, 4, 2 * 3}, DType::F64, kCPU, gen)},
      gen));
}

TEST(GroupedAttentionTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor q = random_tensor({1, 4, 4 * 8}, DType::F32, kCPU, gen);
  const Tensor kv = random_tensor({1, 4, 2 * 8}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(grouped_query_attention(q, kv, kv, 4, 3, true), "3 key/value heads must divide 4");
  EXPECT_FT_ERROR(grouped_query_attention(q, kv, kv, 4, 0, true), "key/value heads");
  EXPECT_FT_ERROR(grouped_query_attention(q, q, q, 4, 2, true), "k and v must be [1, 4, 16]");
  EXPECT_FT_ERROR(grouped_query_attention(q, kv, kv.to(DType::F64), 4, 2, true), "share dtype");
  EXPECT_FT_ERROR(grouped_query_attention(q.reshape({4, 32}), kv, kv, 4, 2, true), "q must be [B, T, NH·HS]");
  EXPECT_FT_ERROR(grouped_query_attention(q, kv, Tensor(), 4, 2, true), "v is an undefined tensor");
  EXPECT_FT_ERROR(grouped_query_attention(q, kv, kv, 4, 2, true, RopeConfig{.theta = -1.0}), "θ must be positive");
  const Tensor odd_q = random_tensor({1, 4, 4 * 3}, DType::F32, kCPU, gen);
  const Tensor odd_kv = random_tensor({1, 4, 2 * 3}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(grouped_query_attention(odd_q, odd_kv, odd_kv, 4, 2, true, RopeConfig{}), "even head size, got 3");
}

struct GroupedCase {
  int64_t batch, heads, kv_heads, tokens, head_size;
  bool causal;
  std::string name() const {
    return "B " + std::to_string(batch) + " NH " + std::to_string(heads) + " NKV " + std::to_string(kv_heads) +
           " T " + std::to_string(tokens) + " HS " + std::to_string(head_size) + (causal ? " causal" : "");
  }
};

std::vector<Tensor> grouped_inputs(const GroupedCase& c, Generator& gen) {
  return {random_tensor({c.batch, c.tokens, c.heads * c.head_size}, DType::F64, kCPU, gen),
          random_tensor({c.batch, c.tokens, c.kv_heads * c.head_size}, DType::F64, kCPU, gen),
          random_tensor({c.batch, c.tokens, c.kv_heads * c.head_size}, DType::F64, kCPU, gen)};
}

/// In bf16 on CUDA, f's fused path against its twin and the f64 reference, recording `nodes`
/// autograd nodes (`what` says what a different count means).
void expect_fused_agrees(const TensorFn& f, const std::vector<Tensor>& inputs, Generator& gen, size_t nodes,
                         const char* what) {
  EXPECT_TRUE(fused_matches_twin(f, inputs, DType::BF16, gen, forward_tolerance(DType::BF16)));
  KernelModeGuard fused(KernelMode::Fused);
  EXPECT_TRUE(matches_f64_reference(f, inputs, kCUDA, DType::BF16, gen, forward_tolerance(DType::BF16),
                                    grad_tolerance(DType::BF16)));
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) leaves.push_back(fresh_leaf(x, DType::BF16, kCUDA));
  EXPECT_EQ(graph_size(f(leaves)), nodes) << what;
}

// Partial query and key tiles (T 77, 300), one token, several query tiles a head, groups of
// 1 (no GQA), 2, 4 (Llama 3's 32/8) and 8 (multi-query), both head sizes; on each family of
// kernels (the Hopper ones where the device has them); without RoPE, and with it (the rope
// kernel first, then the flash kernels, against rope_composite and the attention's twin).
TEST(GroupedAttentionFusedTest, MatchesTwinAndF64Reference) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const GroupedCase cases[] = {{2, 4, 2, 77, 64, true},   {1, 8, 2, 300, 64, true},  {2, 8, 1, 130, 64, false},
                               {1, 4, 4, 200, 64, true},  {2, 4, 1, 1, 64, true},    {1, 4, 2, 300, 128, true},
                               {2, 6, 3, 77, 128, false}};
  std::vector<FlashKernels> families{FlashKernels::MmaSync};
  if (hopper_flash_available()) families.push_back(FlashKernels::PreferHopper);
  for (FlashKernels family : families)
    for (const GroupedCase& c : cases)
      for (bool with_rope : {false, true}) {
        SCOPED_TRACE(c.name() + (family == FlashKernels::MmaSync ? " mma.sync" : " hopper") +
                     (with_rope ? ", RoPE" : ""));
        FlashKernelsGuard kernels(family);
        const auto inputs = grouped_inputs(c, gen);
        std::optional<RopeConfig> rope;
        if (with_rope) rope = c.tokens > 100 ? kLlama3Rope : RopeConfig{.theta = 10000.0};
        auto f = [&c, &rope](const std::vector<Tensor>& in) {
          return grouped_query_attention(in[0], in[1], in[2], c.heads, c.kv_heads, c.causal, rope);
        };
        // With RoPE each rope node sits between two reshapes, before the attention's.
        if (with_rope) expect_fused_agrees(f, inputs, gen, 7, "not the rope kernel and the flash kernels");
        else expect_fused_agrees(f, inputs, gen, 1, "the fused kernels did not run");
      }
}

// The dQ shares of a group's heads are added in a fixed order, and each block adds its group's
// dK and dV in one order: two runs give the same bits, on each family of kernels, at
// Llama-3.2-1B's heads and a T that takes several waves of blocks (Hopper: 16 key tiles × 32
// key/value heads of 4 sequences, 512 blocks a kernel, one a multiprocessor; mma.sync: 1024), so
// that blocks wait for turns of blocks that started in an earlier wave.
TEST(GroupedAttentionFusedTest, BackwardIsBitReproducible) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const GroupedCase c{4, 32, 8, 2048, 64, true};
  const auto inputs = grouped_inputs(c, gen);
  const Tensor upstream = random_tensor({c.batch, c.tokens, c.heads * c.head_size}, DType::F64, kCPU, gen);
  auto f = [&c](const std::vector<Tensor>& in) {
    return grouped_query_attention(in[0], in[1], in[2], c.heads, c.kv_heads, c.causal);
  };
  GradRun twin;
  {
    KernelModeGuard unfused(KernelMode::Unfused);
    twin = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
  }
  std::vector<FlashKernels> families{FlashKernels::MmaSync};
  if (hopper_flash_available()) families.push_back(FlashKernels::PreferHopper);
  KernelModeGuard fused(KernelMode::Fused);
  for (FlashKernels family : families) {
    SCOPED_TRACE(family == FlashKernels::MmaSync ? "mma.sync" : "hopper");
    FlashKernelsGuard kernels(family);
    const GradRun first = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
    const GradRun second = run_with_grads(f, inputs, DType::BF16, kCUDA, upstream);
    EXPECT_EQ(first.y.to_vector(), second.y.to_vector());
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(first.grads[i].to_vector(), second.grads[i].to_vector()) << "input " << i;
      EXPECT_TRUE(all_close(first.grads[i], twin.grads[i], 0.02)) << "input " << i << " against the twin";
    }
  }
}

}  // namespace
}  // namespace ft
