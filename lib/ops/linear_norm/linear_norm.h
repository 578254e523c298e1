// A Linear followed by a LayerNorm, as ops whose norm backward also sums the columns of the dx
// it writes, which is the linear's bias gradient: the linear's backward then runs its two
// products without cuBLASLt's BGRADB reduction, a pass over that dx of its own.
//
// The MLP's hidden layer: a Linear, then LayerNorm, activation and Dropout.
//
// linear_layer_norm_act_dropout(x, W, b, w, β, act, p, seed, offset, eps)
//   = layer_norm_act_dropout(linear(x, W, b), w, β, act, p, seed, offset, eps)
// x: [..., IN]; W: [C, IN]; b, w, β: [C]; dropout as lib/ops/dropout/dropout.h (offset: a one-element i64
// tensor on x's device, when p > 0).
// Fused (CUDA, fused mode, an activation or dropout, where linear takes its cuBLASLt epilogue
// path and the norm its fused kernels): the same two forward kernels, and one backward node in which the norm's backward
// also sums the columns of the dx it writes, which is b's gradient, so the linear's backward runs
// its two products without cuBLASLt's BGRADB reduction, a pass over that dx of its own. Saves x and W for the products, and the linear's
// output with the norm's mean and rstd (and dropout mask), as the two ops would, but held until
// the linear's products have run (one node instead of two).
// Twin: linear_composite, then layer_norm_act_dropout_composite. Where the fused form does not
// apply in fused mode (no bias, neither activation nor dropout, the narrow or bias_act linear, an
// unsupported width), the two ops run one after the other, each fused where it can be.
#pragma once
#include "lib/ops/activation/activation.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/tensor.h"

namespace ft {

Tensor linear_layer_norm_act_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                     double dropout_p, uint64_t seed, const Tensor& offset, double eps = 1e-5);
Tensor linear_layer_norm_act_dropout_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                               const Tensor& norm_weight, const Tensor& norm_bias, Activation act,
                                               double dropout_p, uint64_t seed, const Tensor& offset,
                                               double eps = 1e-5);

/// The transformer's output projection, residual add and next LayerNorm:
///   add_layer_norm(linear(x, W, b), residual, w, β)  (lib/ops/norm/layer_norm.h: {sum, out})
/// x: [..., IN]; W: [C, IN]; b, w, β: [C]; residual: linear's output shape.
/// Fused (CUDA, fused mode, where linear takes its cuBLASLt epilogue path and the norm its
/// fused kernels): the same two forward kernels and autograd nodes as the two ops (the sum's,
/// the norm's), but the norm's backward sums dx's columns (f32) and the sum's node, when the
/// gradient it receives is that dx, takes them as b's gradient, written into b's gradient view
/// when it can claim it: GPT-2's attention and MLP projections, where cuBLASLt's
/// `globalKernelBgradAB_v2` would read dx again. The plain norm backward keeps
/// the sums in registers (norm_kernels.cuh, kDxSumsInRegisters). Where the fused form does not apply, the
/// two ops run one after the other.
/// Twin: linear_composite, then add_layer_norm's twin.
AddNormResult linear_add_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                    const Tensor& norm_weight, const Tensor& norm_bias, double eps = 1e-5);
AddNormResult linear_add_layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              const Tensor& residual, const Tensor& norm_weight,
                                              const Tensor& norm_bias, double eps = 1e-5);

}  // namespace ft
