// linear_layer_norm_act_dropout, the MLP's hidden layer as one op: on the CPU it is its twin (a
// linear, then LayerNorm + activation + dropout) and passes a gradient check in f64; on CUDA the
// fused op (one autograd node, whose norm backward also gives the linear's bias gradient) agrees
// with the twin on the same inputs in f32 and bf16, for every input's gradient or only some; without
// a bias, or with neither activation nor dropout, the two ops run on their own.
// linear_add_layer_norm, GPT-2's projection + residual add + LayerNorm, alike: the twin on the
// CPU, a gradient check in f64, and on CUDA the fused form (two nodes, the norm's backward giving
// the linear its bias gradient) against the twin, with the sum's gradient reaching the norm's
// node before it runs (the column sums are b's gradient) or after (the linear sums them itself).
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/linear_norm/linear_norm.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/random/random.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

struct Epilogue {
  Activation act;
  double p;
};
const Epilogue kEpilogues[] = {
    {Activation::GELU, 0.1}, {Activation::None, 0.3}, {Activation::ReLU, 0.0}, {Activation::None, 0.0}};

/// The dropout offset: a multiple of 8, as PhiloxCounter hands out (a pack of 8 is one Philox
/// call); WithoutABiasTheTwoOpsRun below also takes one that is a multiple of 4 only.
constexpr uint64_t kOffset = 8 * 99;

TensorFn hidden_layer(const Epilogue& e) {
  return [e](const std::vector<Tensor>& in) {
    return linear_layer_norm_act_dropout(in[0], in[1], in[2], in[3], in[4], e.act, e.p, 17,
                                         philox_offset(kOffset, in[0].device()));
  };
}

/// x [..., IN], W [C, IN], b [C], the norm's gain (around 1) and bias [C], in f64 on the CPU.
std::vector<Tensor> layer_inputs(const Shape& x, int64_t c, Generator& gen) {
  return {random_tensor(x, DType::F64, kCPU, gen), random_tensor({c, x.back()}, DType::F64, kCPU, gen),
          random_tensor({c}, DType::F64, kCPU, gen), uniform_tensor({c}, DType::F64, kCPU, gen, 0.5, 1.5),
          random_tensor({c}, DType::F64, kCPU, gen)};
}

/// Fresh CUDA leaves of `dtype` holding the inputs' values.
std::vector<Tensor> cuda_leaves(const std::vector<Tensor>& inputs, DType dtype) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(fresh_leaf(t, dtype, kCUDA));
  return leaves;
}

TEST(LinearNormTest, CpuIsTheTwin) {
  Generator gen = test_generator();
  for (const Epilogue& e : kEpilogues) {
    SCOPED_TRACE(std::string(activation_name(e.act)) + " p " + std::to_string(e.p));
    const std::vector<Tensor> in = layer_inputs({2, 7, 12}, 24, gen);
    const Tensor offset = philox_offset(kOffset, kCPU);
    EXPECT_TRUE(all_equal(
        linear_layer_norm_act_dropout(in[0], in[1], in[2], in[3], in[4], e.act, e.p, 17, offset),
        linear_layer_norm_act_dropout_composite(in[0], in[1], in[2], in[3], in[4], e.act, e.p, 17, offset)));
  }
}

TEST(LinearNormTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(hidden_layer({Activation::GELU, 0.25}), layer_inputs({3, 5}, 6, gen), gen));
}

TEST(LinearNormFusedVsTwinTest, AgreeOnCudaInOneNode) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  // Gradients of every input; not of x (the MLP's first layer); of the norm's parameters only.
  const std::vector<std::vector<bool>> wanted{{}, {false, true, true, true, true}, {false, false, false, true, true}};
  for (const Epilogue& e : kEpilogues)
    for (DType dtype : fused_dtypes())
      for (const auto& [x_shape, c] : std::vector<std::pair<Shape, int64_t>>{{{300, 96}, 768}, {{2, 37, 64}, 1024}})
        for (const std::vector<bool>& wrt : wanted) {
          SCOPED_TRACE(std::string(activation_name(e.act)) + " p " + std::to_string(e.p) + " " + dtype_name(dtype) +
                       " " + shape_str(x_shape) + " -> " + std::to_string(c) + (wrt.empty() ? "" : " some gradients"));
          const std::vector<Tensor> inputs = layer_inputs(x_shape, c, gen);
          EXPECT_TRUE(fused_matches_twin(hidden_layer(e), inputs, dtype, gen, grad_tolerance(dtype), wrt));
          KernelModeGuard fused(KernelMode::Fused);
          const std::vector<Tensor> leaves = cuda_leaves(inputs, dtype);
          const size_t nodes = graph_size(hidden_layer(e)(leaves));
          if (e.act != Activation::None || e.p > 0.0) EXPECT_EQ(nodes, 1u) << "the fused op did not run";
          else EXPECT_GT(nodes, 1u) << "without an epilogue the two ops run on their own";
        }
}

TEST(LinearNormFusedVsTwinTest, WithoutABiasTheTwoOpsRun) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Generator gen = test_generator();
  const std::vector<Tensor> in = layer_inputs({64, 96}, 768, gen);
  const std::vector<Tensor> leaves = cuda_leaves(in, DType::BF16);
  for (const uint64_t at : {kOffset, uint64_t{4 * 99}}) {
    const Tensor offset = philox_offset(at, kCUDA);
    const Tensor y = linear_layer_norm_act_dropout(leaves[0], leaves[1], Tensor(), leaves[3], leaves[4],
                                                   Activation::GELU, 0.1, 17, offset);
    EXPECT_TRUE(all_equal(y, layer_norm_act_dropout(linear(leaves[0], leaves[1]), leaves[3], leaves[4],
                                                    Activation::GELU, 0.1, 17, offset)))
        << "offset " << at;
    EXPECT_GT(graph_size(y), 1u);
  }
}

/// x [..., IN], W [C, IN], b [C], residual [..., C], the norm's gain (around 1) and bias [C], in
/// f64 on the CPU.
std::vector<Tensor> projection_inputs(const Shape& x, int64_t c, Generator& gen) {
  Shape residual = x;
  residual.back() = c;
  std::vector<Tensor> in = layer_inputs(x, c, gen);
  in.insert(in.begin() + 3, random_tensor(residual, DType::F64, kCPU, gen));
  return in;
}

/// Both outputs reach the loss. `sum_first`: sum's other use is recorded first, so backward
/// reaches it after the norm's node (whose dx is then not the sum's whole gradient).
TensorFn projection(bool sum_first) {
  return [sum_first](const std::vector<Tensor>& in) {
    const AddNormResult r = linear_add_layer_norm(in[0], in[1], in[2], in[3], in[4], in[5]);
    return sum_first ? r.sum * 3.0 + r.out : r.out + r.sum * 3.0;
  };
}

TEST(LinearAddNormTest, CpuIsTheTwin) {
  Generator gen = test_generator();
  const std::vector<Tensor> in = projection_inputs({2, 7, 12}, 24, gen);
  const AddNormResult fused = linear_add_layer_norm(in[0], in[1], in[2], in[3], in[4], in[5]);
  const AddNormResult twin = linear_add_layer_norm_composite(in[0], in[1], in[2], in[3], in[4], in[5]);
  EXPECT_TRUE(all_equal(fused.sum, twin.sum));
  EXPECT_TRUE(all_equal(fused.out, twin.out));
}

TEST(LinearAddNormTest, GradCheckF64) {
  Generator gen = test_generator();
  EXPECT_TRUE(gradcheck(projection(false), projection_inputs({3, 5}, 6, gen), gen));
}

TEST(LinearAddNormFusedVsTwinTest, AgreeOnCudaWithTheNormsColumnSums) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  // Every input's gradient; not x's nor the residual's; only the norm's parameters'.
  const std::vector<std::vector<bool>> wanted{
      {}, {false, true, true, false, true, true}, {false, false, false, false, true, true}};
  for (const bool sum_first : {false, true})
    for (DType dtype : fused_dtypes())
      for (const auto& [x_shape, c] :
           std::vector<std::pair<Shape, int64_t>>{{{300, 96}, 768}, {{2, 37, 64}, 1024}, {{33, 48}, 40}})
        for (const std::vector<bool>& wrt : wanted) {
          SCOPED_TRACE(std::string(sum_first ? "sum's other use first " : "") + dtype_name(dtype) + " " +
                       shape_str(x_shape) + " -> " + std::to_string(c) + (wrt.empty() ? "" : " some gradients"));
          const std::vector<Tensor> inputs = projection_inputs(x_shape, c, gen);
          EXPECT_TRUE(fused_matches_twin(projection(sum_first), inputs, dtype, gen, grad_tolerance(dtype), wrt));
          KernelModeGuard fused(KernelMode::Fused);
          const std::vector<Tensor> leaves = cuda_leaves(inputs, dtype);
          const AddNormResult r = linear_add_layer_norm(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4],
                                                        leaves[5]);
          EXPECT_EQ(graph_size(r.out), 2u) << "the fused op did not run (the norm's node and the sum's)";
        }
}

TEST(LinearAddNormFusedVsTwinTest, WithoutABiasTheOpsRunOnTheirOwn) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  KernelModeGuard fused(KernelMode::Fused);
  Generator gen = test_generator();
  const std::vector<Tensor> in = projection_inputs({64, 96}, 768, gen);
  const std::vector<Tensor> leaves = cuda_leaves(in, DType::BF16);
  const AddNormResult r = linear_add_layer_norm(leaves[0], leaves[1], Tensor(), leaves[3], leaves[4], leaves[5]);
  const AddNormResult apart = add_layer_norm(linear(leaves[0], leaves[1]), leaves[3], leaves[4], leaves[5]);
  EXPECT_TRUE(all_equal(r.sum, apart.sum));
  EXPECT_TRUE(all_equal(r.out, apart.out));
  EXPECT_GT(graph_size(r.out), 2u);  // the norm, the add, and the linear's nodes
}

}  // namespace
}  // namespace ft
