// The fused optimizer's kernels directly (optim/multi_tensor.h): a fused step captured in a CUDA
// graph and replayed, with set_lr and new gradients between replays, is bit-identical to eager
// steps; settle_step's norm, clip and skip flag; scale and zero over lists that straddle the
// kernels' chunk boundaries (fused_optim_util.h). CUDA tests: they skip without a GPU.
#include <gtest/gtest.h>

#include "tests/optim/fused_optim_util.h"

namespace ft {
namespace {

using namespace ft::test;

// ---- CUDA graph capture and replay

#if FT_WITH_CUDA
/// `work` captured once into a CUDA graph on the compute stream, then replayed on it.
class CapturedWork {
 public:
  explicit CapturedWork(const std::function<void()>& work) {
    FT_CUDA_CHECK(cudaStreamBeginCapture(cuda::stream(), cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      // Leave the stream out of capture mode, so that the tests after this one can run.
      cudaStreamEndCapture(cuda::stream(), &graph_);
      release();
      cudaGetLastError();
      throw;
    }
    FT_CUDA_CHECK(cudaStreamEndCapture(cuda::stream(), &graph_));
    if (cudaGraphInstantiate(&exec_, graph_, 0) != cudaSuccess) {
      release();
      FT_CHECK(false, "CapturedWork: cudaGraphInstantiate failed");
    }
  }
  ~CapturedWork() { release(); }
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;
  void replay() const { FT_CUDA_CHECK(cudaGraphLaunch(exec_, cuda::stream())); }

 private:
  void release() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};
#endif

class CapturedAdamWTest : public CudaParamKindTest {};

// Setup A steps eagerly; setup B captures one step after the same eager warm-up and replays it.
// Between steps both get new gradients copied into the gradient tensors they already hold (the
// graph keeps their addresses) and a new learning rate from set_lr, outside the capture. Both
// run the same kernels on the same values, so they must agree bit for bit.
TEST_P(CapturedAdamWTest, ReplayedStepsMatchEagerStepsExactly) {
#if FT_WITH_CUDA
  KernelModeGuard mode(KernelMode::Fused);
  Generator gen = test_generator();
  const std::vector<Tensor> eager_params = random_params(chunk_straddling_shapes(120), GetParam(), kCUDA, gen);
  const std::vector<Tensor> graph_params = clone_params(eager_params);
  const AdamW::Options options{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                               .policy = {.max_grad_norm = 1.0}};
  AdamW eager(eager_params, options), graphed(graph_params, options);
  const int64_t replays = steps_for_this_run(5, 2);
  const LRSchedule schedule = changing_schedule(replays + 1, 1e-2);

  set_random_grads(gen, eager_params, {graph_params});  // these tensors stay the gradients
  eager.set_lr(schedule.at(0));
  graphed.set_lr(schedule.at(0));
  eager.step();
  graphed.step();  // the warm-up: whatever a first step sets up happens outside the capture
  CapturedWork captured_step([&] { graphed.step(); });

  for (int64_t step = 1; step <= replays; ++step) {
    for (size_t i = 0; i < eager_params.size(); ++i) {
      const Tensor g = Tensor::randn(eager_params[i].shape(), gen, eager_params[i].dtype(), kCUDA);
      eager_params[i].grad().copy_(g);
      graph_params[i].grad().copy_(g);
    }
    eager.set_lr(schedule.at(step));
    eager.step();
    graphed.set_lr(schedule.at(step));
    captured_step.replay();
  }
  cuda::check_device_errors();
  EXPECT_EQ(eager.applied_steps(), replays + 1);
  EXPECT_EQ(graphed.applied_steps(), replays + 1);
  EXPECT_TRUE(same_bits(snapshot(graph_params, &graphed), snapshot(eager_params, &eager)));
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

INSTANTIATE_TEST_SUITE_P(Kinds, CapturedAdamWTest, kAllKinds, kind_test_name);

// ---- multi_tensor primitives

/// One-element f32 step state on the GPU; -1 marks values settle_step has not written.
StepState sentinel_step_state() {
  auto scalar = [](double v) { return Tensor::full({1}, v, DType::F32, kCUDA); };
  return StepState{.lr = scalar(1e-3), .applied = scalar(0), .skipped = scalar(0), .grad_norm = scalar(-1),
                   .keep = scalar(-1), .clip = scalar(-1)};
}

/// Random tensors of the chunk-straddling shapes, every third one bf16, on the GPU.
std::vector<Tensor> random_tensor_list(Generator& gen) {
  std::vector<Tensor> tensors;
  const std::vector<Shape> shapes = chunk_straddling_shapes(120);
  for (size_t i = 0; i < shapes.size(); ++i)
    tensors.push_back(Tensor::randn(shapes[i], gen, dtype_of(ParamKind::Mixed, i), kCUDA));
  return tensors;
}

TEST(MultiTensorTest, FusedSupportedOnlyForCudaF32AndBf16WithF32State) {
  Generator gen = test_generator();
  EXPECT_FALSE(multi_tensor::fused_supported({Tensor::randn({4}, gen, DType::F32, kCPU)}));
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (the CPU case passed)";
  const Tensor f32 = Tensor::randn({4}, gen, DType::F32, kCUDA), bf16 = Tensor::randn({3}, gen, DType::BF16, kCUDA);
  EXPECT_TRUE(multi_tensor::fused_supported({f32, bf16, Tensor()}));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, bf16}, DType::F64));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, Tensor::randn({4}, gen, DType::F64, kCUDA)}));
  EXPECT_FALSE(multi_tensor::fused_supported({f32, Tensor::randn({4}, gen, DType::F32, kCPU)}));
}

TEST(MultiTensorTest, SettleStepNormMatchesTwinAndIsDeterministic) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> grads = random_tensor_list(gen);
  std::vector<Tensor> params;  // leaves holding `grads`, for the twin grad_norm
  for (const Tensor& g : grads) {
    Tensor p = Tensor::randn(g.shape(), gen, g.dtype(), kCUDA);
    p.requires_grad_();
    p.set_grad(g);
    params.push_back(p);
  }
  double twin_norm = 0;
  {
    KernelModeGuard mode(KernelMode::Unfused);
    twin_norm = grad_norm(params).item();
  }
  const double exact_norm = host_grad_norm(params);
  const double max_grad_norm = 0.5;

  const StepState state = sentinel_step_state();
  multi_tensor::settle_step(grads, state, StepPolicy{.max_grad_norm = max_grad_norm});
  const double norm = state.grad_norm.item();
  EXPECT_NEAR(norm, twin_norm, kNormTolerance * twin_norm);
  EXPECT_NEAR(norm, exact_norm, kNormTolerance * exact_norm);
  EXPECT_NEAR(state.clip.item(), max_grad_norm / (norm + 1e-6), 1e-6 * max_grad_norm / norm);
  EXPECT_EQ(state.keep.item(), 1.0);
  EXPECT_EQ(state.applied.item(), 1.0);
  EXPECT_EQ(state.skipped.item(), 0.0);
  EXPECT_EQ(state.lr.item(), static_cast<double>(1e-3f)) << "settle_step must not write the learning rate";

  // Chunk sums are added in a fixed order: the same bits every time.
  multi_tensor::settle_step(grads, state, StepPolicy{.max_grad_norm = max_grad_norm});
  EXPECT_EQ(state.grad_norm.item(), norm);
  EXPECT_EQ(state.applied.item(), 2.0);

  // Without clipping the factor is exactly 1.
  multi_tensor::settle_step(grads, state, StepPolicy{});
  EXPECT_EQ(state.clip.item(), 1.0);
}

TEST(MultiTensorTest, SettleStepFlagsNonfiniteNorms) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> grads = random_tensor_list(gen);
  poke(grads[grads.size() / 2], grads[grads.size() / 2].numel() / 2, std::numeric_limits<double>::quiet_NaN());

  const StepState skipping = sentinel_step_state();
  multi_tensor::settle_step(grads, skipping, StepPolicy{.max_grad_norm = 1.0});
  EXPECT_TRUE(std::isnan(skipping.grad_norm.item()));
  EXPECT_EQ(skipping.keep.item(), 0.0);
  EXPECT_EQ(skipping.applied.item(), 0.0);
  EXPECT_EQ(skipping.skipped.item(), 1.0);

  const StepState keeping = sentinel_step_state();
  multi_tensor::settle_step(grads, keeping, StepPolicy{.skip_nonfinite = false});
  EXPECT_EQ(keeping.keep.item(), 1.0);
  EXPECT_EQ(keeping.applied.item(), 1.0);
  EXPECT_EQ(keeping.skipped.item(), 0.0);
}

TEST(MultiTensorTest, SettleStepWithoutTensorsKeepsTheStepUnclipped) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const StepState state = sentinel_step_state();
  multi_tensor::settle_step({}, state, StepPolicy{.max_grad_norm = 1.0});
  EXPECT_EQ(state.keep.item(), 1.0);
  EXPECT_EQ(state.clip.item(), 1.0);
  EXPECT_EQ(state.applied.item(), 1.0);
  EXPECT_EQ(state.skipped.item(), 0.0);
}

// scale and zero touch the even-indexed tensors only: the odd ones, allocated between them, must
// keep their bits, which catches a chunk that writes past its tensor's end.
TEST(MultiTensorTest, ScaleMultipliesEveryElementOfTheListOnly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> tensors = random_tensor_list(gen);
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < tensors.size(); i += 2) scaled.push_back(tensors[i]);
  std::vector<std::vector<uint8_t>> before;
  std::vector<std::vector<double>> values;
  for (const Tensor& t : tensors) {
    before.push_back(raw_bytes(t));
    values.push_back(t.to_vector());
  }
  const float factor = 0.37f;
  multi_tensor::scale(scaled, Tensor::full({1}, factor, DType::F32, kCUDA));
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " " + shape_str(tensors[i].shape()));
    if (i % 2) {
      EXPECT_EQ(raw_bytes(tensors[i]), before[i]) << "not in the list, yet written";
      continue;
    }
    // The kernel multiplies in f32 and rounds once to the storage dtype. The product of two f32
    // values is exact in f64, so rounding it to f32 here gives the f32 product, and bf16 follows.
    std::vector<double> product = values[i];
    for (double& x : product) x *= static_cast<double>(factor);
    Tensor expected = Tensor::from_vector(product, tensors[i].shape(), DType::F32);
    if (tensors[i].dtype() == DType::BF16) expected = expected.to(DType::BF16);
    EXPECT_TRUE(all_equal(tensors[i], expected));
  }
}

TEST(MultiTensorTest, ZeroClearsEveryElementOfTheListOnly) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen = test_generator();
  const std::vector<Tensor> tensors = random_tensor_list(gen);
  std::vector<Tensor> zeroed;
  for (size_t i = 0; i < tensors.size(); i += 2) zeroed.push_back(tensors[i]);
  std::vector<std::vector<uint8_t>> before;
  for (const Tensor& t : tensors) before.push_back(raw_bytes(t));
  multi_tensor::zero(zeroed);
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " " + shape_str(tensors[i].shape()));
    if (i % 2) {
      EXPECT_EQ(raw_bytes(tensors[i]), before[i]) << "not in the list, yet written";
      continue;
    }
    // +0.0 in every element: all bytes zero, in either dtype.
    const std::vector<uint8_t> bytes = raw_bytes(tensors[i]);
    size_t nonzero = 0;
    for (uint8_t b : bytes) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u);
  }
}

}  // namespace
}  // namespace ft
