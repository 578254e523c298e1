// The CUDA side of linear: its fused paths (linear_fused.cpp) and launchers (linear.cu,
// narrow_linear.cu). Compiled only in a CUDA build; callers reach it under
// `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/linear/linear.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// linear's fused path on CUDA: the narrow forward when `narrow`, else the cuBLASLt epilogue path.
Tensor linear_fused(const Tensor& x, const Tensor& w, const Tensor& b, Activation act, bool narrow);
/// For the backward of a node whose inputs 1 and 2 are W and b, the linear's backward on the
/// cuBLASLt epilogue path without an activation, from g = its output's gradient (x2 [N, IN] the
/// saved input): b's gradient is the handoff's (the view written, or the sums) when g is
/// handoff.grad itself (nothing was added to it after the consumer summed it), else cuBLASLt's
/// BGRADB. Empties the handoff but for its bias. Returns {dx (x_shape), dW, db}, each undefined
/// where not wanted.
std::vector<Tensor> linear_backward_with_handoff(const Tensor& g, const Tensor& x2, const Tensor& w,
                                                 BiasGradHandoff& handoff, bool want_x, bool want_w, bool want_b,
                                                 const Shape& x_shape);

/// y = act(x·Wᵀ + b) for x [N, IN]; pre receives x·Wᵀ + b when act is GELU (else unused).
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& y,
                    const Tensor& pre);
/// From dy [N, OUT]: dx [N, IN], dW [OUT, IN], db [OUT] (each undefined when not wanted; dW and
/// db overwritten, or added into f32 views: cuBLASLt writes dW in f32 with beta = 1).
/// `saved` is pre for GELU, y for ReLU, unused for None.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Activation act, const Tensor& saved,
                     const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias);

/// The narrow forward (lib/ops/linear/narrow_linear.cu): bf16, at most kNarrowLinearMaxOut outputs,
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

}  // namespace ft::cuda
