// The fused path shared by layer_norm, add_layer_norm, rms_norm and add_rms_norm: checks,
// the dispatch test, and the autograd wiring around lib/cuda/norm.cu. Internal to lib/ops.
#pragma once
#include <memory>

#include "lib/ops/layer_norm.h"
#include "lib/ops/linear.h"

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
/// The fused forward's outputs and what its backward reads: the mean (the epilogue form, when
/// training) and rstd, and the epilogue with the dropout mask it wrote (or none, to draw again).
struct NormFusedForward {
  AddNormResult result;
  Tensor mean, rstd;
  NormEpilogue epilogue;
};
/// The fused forward alone (no autograd record): for ops that record one node around the norm.
NormFusedForward norm_fused_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    const Tensor& bias, double eps, const NormEpilogue& epilogue, bool training);
/// Records the fused norm's backward for `forward` (norm_fused_forward's), whose normalized
/// input is `input` (x, or the residual sum's node): one node that adds the input's pending
/// gradient itself. With dx_sums, the backward also leaves there the column sums of the dx it
/// writes (f32 [C]) and that dx: the bias gradient of a linear whose output the norm normalizes
/// (linear_add_layer_norm).
Tensor record_fused_norm(const NormFusedForward& forward, NormKind kind, const Tensor& input, const Tensor& weight,
                         const Tensor& bias, const std::shared_ptr<BiasGradHandoff>& dx_sums = nullptr);
/// Runs the fused forward and records backward. With residual undefined, sum is undefined.
AddNormResult norm_fused(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight,
                         const Tensor& bias, double eps, const NormEpilogue& epilogue = {});

}  // namespace ft
