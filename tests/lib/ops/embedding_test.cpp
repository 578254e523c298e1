// token_position_embedding and token_embedding: against loops in f64, gradients by central
// differences, the fused kernels against the twins and the f64 reference (ids with many repeats,
// packed and odd widths), bit-reproducible backwards, and bad ids.
#include <functional>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/embedding/embedding.h"
#include "lib/runtime.h"
#include "tests/lib/fused_test_util.h"

namespace ft {
namespace {

using namespace ft::test;

TEST(EmbeddingTest, MatchesLoopsInF64) {
  Generator gen = test_generator();
  const int64_t b = 3, t = 5, v = 7, p = 9, c = 4;
  const Tensor ids = random_ids({b, t}, v, DType::I64, kCPU, gen);
  const Tensor tokens = random_tensor({v, c}, DType::F64, kCPU, gen), positions = random_tensor({p, c}, DType::F64, kCPU, gen);
  const std::vector<double> out = token_position_embedding(ids, tokens, positions).to_vector();
  const std::vector<double> vi = ids.to_vector(), vt = tokens.to_vector(), vp = positions.to_vector();
  ASSERT_EQ(out.size(), static_cast<size_t>(b * t * c));
  for (int64_t i = 0; i < b * t; ++i)
    for (int64_t k = 0; k < c; ++k)
      EXPECT_EQ(out[static_cast<size_t>(i * c + k)], vt[static_cast<size_t>(static_cast<int64_t>(vi[static_cast<size_t>(i)]) * c + k)] +
                                                           vp[static_cast<size_t>((i % t) * c + k)]);
}

TEST(EmbeddingTest, GradCheckF64) {
  Generator gen = test_generator();
  const Tensor ids = random_ids({2, 3}, 4, DType::I32, kCPU, gen);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return token_position_embedding(ids, in[0], in[1]); },
                        {random_tensor({4, 3}, DType::F64, kCPU, gen), random_tensor({5, 3}, DType::F64, kCPU, gen)},
                        gen));
}

TEST(EmbeddingTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor tokens = random_tensor({5, 4}, DType::F32, kCPU, gen), positions = random_tensor({3, 4}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(token_position_embedding(Tensor::from_vector({0, 5}, {1, 2}, DType::I64), tokens, positions),
                  "out of range");
  EXPECT_FT_ERROR(token_position_embedding(Tensor::from_vector({0, 1, 2, 3}, {1, 4}, DType::I64), tokens, positions),
                  "positions");
  EXPECT_FT_ERROR(token_position_embedding(Tensor::from_vector({0, 1}, {2}, DType::I64), tokens, positions), "[B, T]");
  EXPECT_FT_ERROR(token_position_embedding(Tensor::from_vector({0, 1}, {1, 2}, DType::I64), tokens,
                                           random_tensor({3, 5}, DType::F32, kCPU, gen)),
                  "share C");
}

TEST(TokenEmbeddingTest, MatchesLoopsAndGradCheckInF64) {
  Generator gen = test_generator();
  const int64_t v = 7, c = 4;
  const Tensor ids = random_ids({2, 3, 5}, v, DType::I32, kCPU, gen);
  const Tensor tokens = random_tensor({v, c}, DType::F64, kCPU, gen);
  const Tensor out = token_embedding(ids, tokens);
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{2, 3, 5, c}));
  const std::vector<double> got = out.to_vector(), vi = ids.to_vector(), vt = tokens.to_vector();
  for (size_t i = 0; i < vi.size(); ++i)
    for (int64_t k = 0; k < c; ++k)
      EXPECT_EQ(got[i * c + static_cast<size_t>(k)], vt[static_cast<size_t>(static_cast<int64_t>(vi[i]) * c + k)]);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return token_embedding(ids, in[0]); },
                        {random_tensor({v, 3}, DType::F64, kCPU, gen)}, gen));
}

TEST(TokenEmbeddingTest, RejectsBadInputs) {
  Generator gen = test_generator();
  const Tensor tokens = random_tensor({5, 4}, DType::F32, kCPU, gen);
  EXPECT_FT_ERROR(token_embedding(Tensor::from_vector({0, 5}, {1, 2}, DType::I64), tokens), "out of range");
  EXPECT_FT_ERROR(token_embedding(Tensor::from_vector({0, 1}, {2}, DType::F32), tokens), "i32 or i64");
  EXPECT_FT_ERROR(token_embedding(Tensor::from_vector({0, 1}, {2}, DType::I64), random_tensor({20}, DType::F32, kCPU, gen)),
                  "[V, C]");
}

class EmbeddingDeviceTest : public DeviceModeTest {};

// Against the f64 reference in both dtypes, at a packed and an odd width C; `tables(c)` draws
// the tables after the ids, 96 of them from 11 rows: every row repeats, so the sorted runs are long.
void expect_matches_f64_reference(const TensorFn& f, const std::function<std::vector<Tensor>(int64_t c)>& tables,
                                  Device device, Generator& gen) {
  for (DType dtype : {DType::F32, DType::BF16})
    for (int64_t c : {768, 13}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(c));
      std::vector<Tensor> inputs{random_ids({4, 24}, 11, DType::I64, kCPU, gen)};
      for (const Tensor& t : tables(c)) inputs.push_back(t);
      EXPECT_TRUE(matches_f64_reference(f, inputs, device, dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)));
    }
}

TEST_P(EmbeddingDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  expect_matches_f64_reference(
      [](const std::vector<Tensor>& in) { return token_position_embedding(in[0], in[1], in[2]); },
      [&](int64_t c) {
        return std::vector<Tensor>{random_tensor({11, c}, DType::F64, kCPU, gen),
                                   random_tensor({30, c}, DType::F64, kCPU, gen)};
      },
      device(), gen);
}

TEST_P(EmbeddingDeviceTest, TokensAloneMatchF64Reference) {
  Generator gen = test_generator();
  expect_matches_f64_reference([](const std::vector<Tensor>& in) { return token_embedding(in[0], in[1]); },
                               [&](int64_t c) { return std::vector<Tensor>{random_tensor({11, c}, DType::F64, kCPU, gen)}; },
                               device(), gen);
}

INSTANTIATE_TEST_SUITE_P(Modes, EmbeddingDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// The fused kernel against its twin in each fused dtype, run alone (one node), and every table's
// gradient bit for bit the same in two runs; `inputs` are the ids and the tables, out_shape f's.
void expect_fused_matches_twin_reproducibly(const TensorFn& f, const std::vector<Tensor>& inputs, const Shape& out_shape,
                                            Generator& gen) {
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(fused_matches_twin(f, inputs, dtype, gen, forward_tolerance(dtype)));
    KernelModeGuard fused(KernelMode::Fused);
    const Tensor w = random_tensor(out_shape, DType::F64, kCPU, gen);
    const GradRun first = run_with_grads(f, inputs, dtype, kCUDA, w), second = run_with_grads(f, inputs, dtype, kCUDA, w);
    EXPECT_EQ(graph_size(first.y), 1u) << "the fused kernel did not run";
    for (size_t i = 1; i < inputs.size(); ++i)
      EXPECT_TRUE(all_equal(first.grads[i], second.grads[i])) << "table " << i << "'s gradient differs between two runs";
  }
}

TEST(EmbeddingFusedTest, MatchesTwinAndIsReproducible) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  expect_fused_matches_twin_reproducibly(
      [](const std::vector<Tensor>& in) { return token_position_embedding(in[0], in[1], in[2]); },
      {random_ids({8, 64}, 50, DType::I32, kCPU, gen), random_tensor({50, 768}, DType::F64, kCPU, gen),
       random_tensor({64, 768}, DType::F64, kCPU, gen)},
      {8, 64, 768}, gen);
}

// Llama's embed_tokens: the twin's atomic scatter-add gives timing-dependent bits where ids
// repeat; the fused backward sums each id's rows in a fixed order.
TEST(EmbeddingFusedTest, TokensAloneMatchTwinAndAreReproducible) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  expect_fused_matches_twin_reproducibly([](const std::vector<Tensor>& in) { return token_embedding(in[0], in[1]); },
                                         {random_ids({8, 256}, 29, DType::I64, kCPU, gen),
                                          random_tensor({29, 512}, DType::F64, kCPU, gen)},
                                         {8, 256, 512}, gen);
}

TEST(EmbeddingFusedTest, IdOutOfRangeThrowsAtTheNextRead) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  const Tensor tokens = Tensor::zeros({5, 8}, DType::BF16, kCUDA), positions = Tensor::zeros({4, 8}, DType::BF16, kCUDA);
  Tensor out;
  EXPECT_NO_THROW(out = token_position_embedding(Tensor::from_vector({0, 7, 1}, {1, 3}, DType::I64, kCUDA), tokens,
                                                 positions));
  EXPECT_TRUE(error_mentions([] { synchronize(); }, "out of range"));
  EXPECT_NO_THROW(out = token_embedding(Tensor::from_vector({0, -1}, {2}, DType::I64, kCUDA), tokens));
  EXPECT_TRUE(error_mentions([] { synchronize(); }, "out of range"));
}

}  // namespace
}  // namespace ft
