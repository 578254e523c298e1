// linear(x, W, b, activation) = activation(x · Wᵀ + b): the first fused op.
//
// x: [..., IN], W: [OUT, IN], b: [OUT] or undefined; result [..., OUT], x's dtype.
// Fused (CUDA, bf16/f32; activation None, ReLU or GELU): one cuBLASLt product whose epilogue adds the bias and applies the
// activation; GELU saves the pre-activation as the epilogue's aux output for backward, which
// computes dpre = dy·act'(pre) and the bias gradient in one kernel, then dx = dpre·W and dW as
// plain products (without an activation, dW's BGRADB epilogue sums the bias gradient). Saves
// x, W and (GELU) the pre-activation, (ReLU) the output.
// Second fused strategy: the matmul primitive (no epilogue) followed by the fused bias_act
// kernel (lib/ops/bias_act.h). Which fused strategy runs is chosen per shape by
// linear_fusion_for(); set_linear_fusion() pins one (for tests and benchmarks).
// Third, for bf16 with at most 16 outputs, IN a multiple of 32 up to 2048, a bias and no
// activation (a classifier): the narrow forward (lib/cuda/narrow_linear.cu), one pass over x on
// the tensor cores with the bias added before the one rounding, where cuBLAS's tiles left most
// of each tensor-core tile empty. Its backward: dx by the matmul primitive, dW and db in one
// pass over x on the tensor cores (narrow_linear_backward_params), straight into their f32
// gradient views. Saves x and W.
// Twin: matmul + add + activation primitives.
#pragma once
#include "lib/ops/activation.h"
#include "lib/autograd.h"
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
/// For the backward of a node whose inputs 1 and 2 are W and b, the linear's backward on the
/// cuBLASLt epilogue path without an activation, from g = its output's gradient (x2 [N, IN] the
/// saved input): b's gradient is the handoff's (the view written, or the sums) when g is
/// handoff.grad itself (nothing was added to it after the consumer summed it), else cuBLASLt's
/// BGRADB. Empties the handoff but for its bias. Returns {dx (x_shape), dW, db}, each undefined
/// where not wanted.
std::vector<Tensor> linear_backward_with_handoff(const Tensor& g, const Tensor& x2, const Tensor& w,
                                                 BiasGradHandoff& handoff, bool want_x, bool want_w, bool want_b,
                                                 const Shape& x_shape);

namespace cuda {
/// y = act(x·Wᵀ + b) for x [N, IN]; pre receives x·Wᵀ + b when act is GELU (else unused).
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& y,
                    const Tensor& pre);
/// From dy [N, OUT]: dx [N, IN], dW [OUT, IN], db [OUT] (each undefined when not wanted; dW and
/// db overwritten, or added into f32 views: cuBLASLt writes dW in f32 with beta = 1).
/// `saved` is pre for GELU, y for ReLU, unused for None.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Activation act, const Tensor& saved,
                     const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias);

/// The narrow forward (lib/cuda/narrow_linear.cu): bf16, at most kNarrowLinearMaxOut outputs,
/// IN a multiple of 32 up to kNarrowLinearMaxIn (W and two groups of 8 rows share one block's
/// shared memory: 133 KB at 2048), no activation. Whether x [N, IN] and W allow it.
constexpr int kNarrowLinearMaxOut = 16;
constexpr int kNarrowLinearMaxIn = 2048;
bool narrow_linear_supported(const Tensor& x, const Tensor& weight);
/// y [N, OUT] = x·Wᵀ + b (b may be undefined).
void narrow_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);
/// The narrow layer's dW [OUT, IN] = dyᵀ·x and db [OUT] = column sums of dy (bf16 dy [N, OUT] and
/// 16-byte aligned x [N, IN], IN a multiple of 32, N > 0), in one pass over x and a kernel adding the row chunks' sums
/// in a fixed order; each overwritten, or added into an f32 view, or skipped when undefined.
void narrow_linear_backward_params(const Tensor& dy, const Tensor& x, const GradOutput& dweight,
                                   const GradOutput& dbias);
}  // namespace cuda

}  // namespace ft
