// Helpers shared by the fused ops' tests (bias_act, dropout, the norms, the cross-entropies):
// the fused CUDA path against its composite twin on the very same inputs, and the size of a
// recorded graph (which tells which path ran without naming its nodes).
//
// Every fused op is also checked against the CPU f64 reference with matches_f64_reference over
// device_modes(); these helpers add the direct fused-vs-twin comparison the issue asks for.
#pragma once
#include <set>
#include <vector>

#include "tests/lib/test_util.h"

namespace ft::test {

/// The dtypes the fused kernels take; other dtypes (f64) run the twin even in fused mode.
inline std::vector<DType> fused_dtypes() { return {DType::F32, DType::BF16}; }

/// One run's output and the gradient of each input (undefined where none was asked for).
struct GradRun {
  Tensor y;
  std::vector<Tensor> grads;
};

/// Runs f on fresh leaves made from `inputs` (floating ones converted to dtype on device and
/// marked as needing a gradient where `wrt` allows; integer ones copied to device), then, when
/// the output has history, backward with `upstream` converted to the output's dtype on device.
inline GradRun run_with_grads(const TensorFn& f, const std::vector<Tensor>& inputs, DType dtype, Device device,
                              const Tensor& upstream, const std::vector<bool>& wrt = {}) {
  std::vector<Tensor> leaves(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    if (!is_floating(x.dtype())) {
      leaves[i] = fresh_copy(x, x.dtype(), device);
      continue;
    }
    leaves[i] = fresh_copy(x, dtype, device);
    if (wrt.empty() || wrt[i]) leaves[i].requires_grad_();
  }
  GradRun run;
  run.y = f(leaves);
  if (run.y.requires_grad()) run.y.backward(fresh_copy(upstream, run.y.dtype(), device));
  for (const Tensor& leaf : leaves)
    run.grads.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad() : Tensor());
  return run;
}

/// On CUDA, f in KernelMode::Fused against f in KernelMode::Unfused (the twin) on the same
/// rounded inputs and the same upstream gradient: the outputs and every input gradient agree.
/// Each path is within tol · ‖r‖ + u · ‖r_abs‖ of the exact result (matches_f64_reference's
/// bound, r_abs computed in f64 from |inputs| and |upstream|), so their difference is allowed
/// twice that.
inline ::testing::AssertionResult fused_matches_twin(const TensorFn& f, const std::vector<Tensor>& inputs, DType dtype,
                                                     Generator& gen, double tol, const std::vector<bool>& wrt = {}) {
  if (!cuda_available()) return ::testing::AssertionFailure() << "fused_matches_twin needs a GPU";
  // |rounded inputs| in f64 on the CPU: the size of the terms every result sums.
  std::vector<Tensor> absolute(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !is_floating(x.dtype())) {
      absolute[i] = x;
      continue;
    }
    std::vector<double> v = fresh_copy(fresh_copy(x, dtype, kCPU), DType::F64, kCPU).to_vector();
    for (double& a : v) a = std::abs(a);
    absolute[i] = Tensor::from_vector(v, x.shape(), DType::F64);
  }
  const Tensor probe = f(absolute);  // only its shape
  const Tensor w = random_tensor(probe.shape(), DType::F64, kCPU, gen);
  std::vector<double> wa = w.to_vector();
  for (double& a : wa) a = std::abs(a);
  const GradRun abs_run =
      run_with_grads(f, absolute, DType::F64, kCPU, Tensor::from_vector(wa, w.shape(), DType::F64), wrt);

  GradRun runs[2];
  for (int fused = 0; fused < 2; ++fused) {
    KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
    runs[fused] = run_with_grads(f, inputs, dtype, kCUDA, w, wrt);
  }
  const double u = unit_roundoff(dtype);
  const GradRun &twin = runs[0], &fused = runs[1];
  if (auto r = all_close(fused.y, twin.y, 2.0 * tol, 2.0 * u * norm_of(abs_run.y.to_vector())); !r)
    return ::testing::AssertionFailure() << "output: fused vs twin: " << r.message();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &g = fused.grads[i], &g_twin = twin.grads[i];
    if (g.defined() != g_twin.defined())
      return ::testing::AssertionFailure()
             << "gradient of input " << i << (g.defined() ? " is" : " is not") << " defined in fused mode but"
             << (g_twin.defined() ? " is" : " is not") << " in the twin";
    if (!g.defined()) continue;
    if (g.dtype() != g_twin.dtype() || !g.is_cuda())
      return ::testing::AssertionFailure() << "gradient of input " << i << " is " << dtype_name(g.dtype()) << " on "
                                           << g.device().str() << ", the twin's " << dtype_name(g_twin.dtype());
    const Tensor g_abs = abs_run.grads[i];
    const double allowance = g_abs.defined() ? 2.0 * u * norm_of(g_abs.to_vector()) : 0.0;
    if (auto r = all_close(g, g_twin, 2.0 * tol, allowance); !r)
      return ::testing::AssertionFailure() << "gradient of input " << i << ": fused vs twin: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

/// The number of distinct autograd nodes reachable from t (0 without history). A fused op
/// records one node where its twin records one per primitive.
inline size_t graph_size(const Tensor& t) {
  std::set<const Node*> seen;
  std::vector<const Node*> stack;
  if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const Edge& e : node->edges)
      if (e.node) stack.push_back(e.node.get());
  }
  return seen.size();
}

/// Which path ran shows in the graph: f on f32 leaves made from `inputs` records fewer nodes in
/// fused mode than in unfused mode on CUDA (one fused node against the twin's primitives), and
/// as many on the CPU, where both modes run the twin.
inline void expect_fewer_nodes_fused_on_cuda_only(const TensorFn& f, const std::vector<Tensor>& inputs) {
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    std::vector<Tensor> leaves;
    for (const Tensor& x : inputs) leaves.push_back(fresh_leaf(x, DType::F32, device));
    size_t sizes[2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused] = graph_size(f(leaves));
    }
    SCOPED_TRACE(device.str());
    EXPECT_GT(sizes[0], 0u);
    if (device.is_cuda())
      EXPECT_LT(sizes[1], sizes[0]);
    else
      EXPECT_EQ(sizes[1], sizes[0]);
  }
}

/// Column sums of a [..., C] tensor, in doubles (the expected bias gradient).
inline std::vector<double> column_sums(const Tensor& t) {
  const int64_t c = t.size(-1);
  std::vector<double> out(static_cast<size_t>(c), 0.0);
  const std::vector<double> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i) out[i % static_cast<size_t>(c)] += v[i];
  return out;
}

}  // namespace ft::test
