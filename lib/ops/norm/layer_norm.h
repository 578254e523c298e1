// Layer normalization over the last dim C, alone or after a residual add.
//
// layer_norm(x, w, b) = (x − mean) / √(var + eps) · w + b; x: [..., C]; w, b: [C].
// add_layer_norm(x, residual, w, b) returns sum = x + residual (the next residual stream) and
// out = layer_norm(sum, w, b), both from one pass.
// Statistics in f32 (bf16 inputs are upcast); outputs in x's dtype.
// Fused (CUDA, f32/bf16): forward one kernel, a warp per row, reading x (and residual) once and
// writing out (and sum) once. For backward it saves rstd per row (f32) and its output, not its
// input (Apex's memory_efficient LayerNorm): the next op (a linear) keeps the output anyway, so
// the input, or the sum of the add form, is not held until backward. Backward one kernel: dx
// per row with x̂ = (out − b)/w, and dw, db as per-block column partials that a small kernel
// adds up in a fixed order (deterministic, no atomics on the values).
// Limitation of the fused backward: a weight element w_j = 0 erases x̂ from column j of the
// output, so the gradients of x and w_j there cannot be formed: they come out NaN, and the
// kernel flags a device error that the next synchronizing read (item(), to(CPU),
// ft::synchronize()) throws as ft::Error. A |w_j| that is tiny beside |b_j| loses x̂'s precision
// the same way (out's rounding, about u·|b_j / w_j|, where u is its dtype's unit roundoff) and is
// not flagged. The twins (CPU, unfused mode, f64) save their inputs and have neither limit.
// Twins: mean, sub, mul, rsqrt, add primitives (in f32 for bf16 inputs).
//
// layer_norm_act_dropout(x, w, b, act, p, seed, offset) = dropout(act(layer_norm(x, w, b)), p),
// the MLP block's "LayerNorm, activation, Dropout" as one op. Dropout keeps element i when
// philox::dropout_uniform(seed, offset, i) >= p, as lib/ops/dropout/dropout.h (offset: a one-element i64 tensor
// on x's device). Fused: the norm kernels with an epilogue: forward writes only the dropped
// activation; backward regenerates the mask, recomputes the normalized value for act', and runs
// the LayerNorm backward on the result (one kernel each way, where the twin chain has three).
// Its output is not the normalized value, so it saves its input x and the mean (no limit on w).
// Twin: layer_norm_composite, activate, dropout_composite.
#pragma once
#include "lib/autograd.h"
#include "lib/ops/activation/activation.h"
#include "lib/tensor.h"

namespace ft {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

Tensor layer_norm_act_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                              double dropout_p, uint64_t seed, const Tensor& offset, double eps = 1e-5);
Tensor layer_norm_act_dropout_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                                        double dropout_p, uint64_t seed, const Tensor& offset, double eps = 1e-5);

struct AddNormResult {
  Tensor sum;  // x + residual
  Tensor out;  // norm(sum)
};
AddNormResult add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                             double eps = 1e-5);

enum class NormKind : uint8_t { Layer, RMS };

/// What the fused norm applies after normalizing (and undoes first in backward): an activation,
/// then Philox dropout with probability dropout_p (offset: one i64 element on the device).
struct NormEpilogue {
  Activation act = Activation::None;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  Tensor offset;
  /// The dropout's keep bits (U8, one byte per 8 consecutive elements, bit k for element 8j + k):
  /// the forward writes them when defined and it can (norm_forward says), the backward then reads
  /// them instead of drawing the Philox numbers again (a quarter of its instructions in the MLP).
  Tensor mask;
  bool active() const { return act != Activation::None || dropout_p > 0.0; }
};

}  // namespace ft
