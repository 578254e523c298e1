// The CUDA side of the norms: the fused path that layer_norm, add_layer_norm, rms_norm, add_rms_norm and
// linear_add_layer_norm share (norm_fused.cpp), and the launchers (norm_forward.cu, norm_backward.cu).
// Compiled only in a CUDA build; callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>
#include <memory>

#include "lib/autograd.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/tensor.h"

namespace ft::cuda {

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

/// Whether the fused kernels take rows of this width (up to 8192; wider rows use the twin).
bool norm_supported(int64_t cols);
/// Normalizes rows of `x` (+ `residual`, stored to `sum`, when residual is defined). RMS skips the
/// mean and the bias. mean is written when defined (Layer only); rstd always (f32 [rows]). Returns whether
/// the epilogue's dropout mask was written (packed bf16 rows of a multiple of 8 columns).
bool norm_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                  double eps, const Tensor& sum, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                  const NormEpilogue& epilogue = {});
/// dx (overwritten), and dweight, dbias (when defined; overwritten, or added into f32 views) from
/// dy, rstd and `saved`. Without an epilogue, `saved` is the norm's output y and x̂ = (y − bias)/w
/// (`bias` required for Layer, undefined for RMS; mean unused); a zero weight element makes
/// that column's dx and dweight NaN and sets the device error word (layer_norm.h's limitation).
/// With an epilogue, `saved` is the normalized input x (the sum, for the add form) with its
/// mean, x̂ = (x − mean)·rstd, dy is the gradient of the epilogue's output, and `bias` (the
/// norm's, or undefined) recomputes act's input. A defined `addend` (saved's shape and dtype) is
/// added into dx in the same pass: the gradient that x's other uses (the residual stream) have
/// already contributed. A defined `dx_column_sums` [C] gets the column sums of dx as stored
/// (rounded to its dtype), overwritten or added into an f32 view: the bias gradient of a linear
/// layer whose output is this norm's input, without a pass over dx of its own.
void norm_backward(NormKind kind, const Tensor& dy, const Tensor& saved, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias,
                   const NormEpilogue& epilogue = {}, const Tensor& bias = Tensor(), const Tensor& addend = Tensor(),
                   const GradOutput& dx_column_sums = GradOutput());

}  // namespace ft::cuda
