// What layer_norm, add_layer_norm, rms_norm and add_rms_norm share: the input checks and the
// dispatch test. Their fused path is in norm_cuda.h. Internal to lib/ops.
#pragma once
#include "lib/ops/norm/layer_norm.h"

namespace ft {

/// Throws ft::Error unless x is [..., C], residual (when given) matches x, and weight (and bias,
/// when the norm has one) are [C] of x's dtype and device.
void check_norm_inputs(const char* op, const Tensor& x, const Tensor& residual, const Tensor& weight,
                       const Tensor& bias, bool has_bias);
/// check_norm_inputs (with a bias), then the epilogue's dropout: p in [0, 1), and with p > 0 a
/// valid Philox offset.
void check_norm_epilogue_inputs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                double dropout_p, const Tensor& offset);
/// Fused mode, CUDA, f32/bf16, non-empty.
bool norm_fused_ok(const Tensor& x);

}  // namespace ft
