// linear(x, W, b, activation) = activation(x · Wᵀ + b): the first fused op.
//
// x: [..., IN], W: [OUT, IN], b: [OUT] or undefined; result [..., OUT], x's dtype.
// Fused (CUDA, bf16/f32; activation None, ReLU or GELU): one cuBLASLt product whose epilogue adds the bias and applies the
// activation; GELU saves the pre-activation as the epilogue's aux output for backward, which
// computes dpre = dy·act'(pre) and the bias gradient in one kernel, then dx = dpre·W and dW as
// plain products (without an activation, dW's BGRADB epilogue sums the bias gradient). Saves
// x, W and (GELU) the pre-activation, (ReLU) the output.
// Second fused strategy: the matmul primitive (no epilogue) followed by the fused bias_act
// kernel (lib/ops/bias_act/bias_act.h). Which fused strategy runs is chosen per shape by
// linear_fusion_for(); set_linear_fusion() pins one (for tests and benchmarks).
// Third, for bf16 with at most 16 outputs, IN a multiple of 32 up to 2048, a bias and no
// activation (a classifier): the narrow forward (lib/ops/linear/narrow_linear.cu), one pass over x on
// the tensor cores with the bias added before the one rounding, where cuBLAS's tiles left most
// of each tensor-core tile empty. Its backward: dx by the matmul primitive, dW and db in one
// pass over x on the tensor cores (narrow_linear_backward_params), straight into their f32
// gradient views. Saves x and W.
// Twin: matmul + add + activation primitives.
#pragma once
#include "lib/autograd.h"
#include "lib/ops/activation/activation.h"
#include "lib/tensor.h"

namespace ft {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Activation act = Activation::None);

enum class LinearFusion : uint8_t { Auto, Epilogue, MatmulBiasAct };
/// Pins the fused strategy (Auto: the per-shape rule). Read only in linear's dispatch.
void set_linear_fusion(LinearFusion fusion);
LinearFusion linear_fusion();
/// The strategy Auto picks for rows × in → out with this activation.
LinearFusion linear_fusion_for(int64_t rows, int64_t in, int64_t out, Activation act);

/// The composite twin, always built from primitives (the CPU path and the unfused CUDA path).
Tensor linear_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);
/// Throws ft::Error naming what is wrong unless x is [..., IN], weight [OUT, IN] of x's dtype and
/// device, and bias (when defined) [OUT] alike.
void check_linear_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias);
/// Whether linear(x, weight, bias, act) takes the cuBLASLt epilogue path (fused mode, neither the
/// narrow forward nor the bias_act form): ops built around it (linear_norm.h) run its kernels.
bool linear_takes_epilogue_path(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);

/// A linear's bias gradient from the op that consumes its output (linear_add_layer_norm,
/// qkv_attention): that op's backward sums the columns of the gradient it produces for the
/// linear's output, into the bias's gradient view when it can claim it (`written`), else into
/// f32 [OUT] `sums`, and leaves that gradient (`grad`) beside them.
struct BiasGradHandoff {
  Tensor bias;  // the linear's, whose gradient view the consumer may claim
  Tensor sums, written, grad;
};
/// In the consumer's backward, before its kernels sum: where the sums go, noted in `handoff`.
/// The bias's gradient view (claim_leaf_grad_view) when the consumer's input 0 is the linear's
/// output and its gradient is complete there (completes_input_gradient), so that no kernel adds
/// the sums in later; else fresh f32 sums [out] on `device`.
GradOutput bias_sums_target(BiasGradHandoff& handoff, int64_t out, Device device);
}  // namespace ft
