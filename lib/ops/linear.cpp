#include "lib/ops/linear.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/bias_act.h"
#include "lib/ops/matmul.h"

namespace ft {

void check_linear_inputs(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_defined(x, "linear", "x");
  check_defined(w, "linear", "weight");
  FT_CHECK(w.dim() == 2, "linear: weight must be [OUT, IN], got ", shape_str(w.shape()));
  FT_CHECK(x.dim() >= 2 && x.size(-1) == w.size(1), "linear: x ", shape_str(x.shape()), " does not end in IN = ",
           w.size(1), " of weight ", shape_str(w.shape()));
  FT_CHECK(x.dtype() == w.dtype() && x.device() == w.device(), "linear: x is ", dtype_name(x.dtype()), " on ",
           x.device().str(), ", weight is ", dtype_name(w.dtype()), " on ", w.device().str());
  if (b.defined())
    FT_CHECK(b.dim() == 1 && b.size(0) == w.size(0) && b.dtype() == w.dtype() && b.device() == w.device(),
             "linear: bias must be [", w.size(0), "] ", dtype_name(w.dtype()), " on ", w.device().str(), ", got ",
             shape_str(b.shape()), " ", dtype_name(b.dtype()), " on ", b.device().str());
}

namespace {

// cuBLASLt epilogues need f32/bf16, a bias to fuse, and 16-byte-aligned rows for the aux buffer.
bool fused_supported(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  const bool epilogue_act = act == Activation::None || act == Activation::ReLU || act == Activation::GELU;
  return (x.dtype() == DType::BF16 || x.dtype() == DType::F32) && b.defined() && w.size(0) % 8 == 0 &&
         x.numel() > 0 && epilogue_act;
}

/// The fused forms. `narrow`: the narrow forward (few outputs, no activation; lib/ops/linear.h),
/// whose backward is dx by the matmul primitive and dW, db by the narrow kernel: the epilogue
/// path's dW product into an f32 gradient view took cuBLASLt's magma_sgemmEx kernel at OUT = 10,
/// 167 us on the H100. Otherwise the cuBLASLt epilogue path both ways.
Tensor linear_fused(const Tensor& x, const Tensor& w, const Tensor& b, Activation act, bool narrow) {
  const int64_t in = w.size(1), out_features = w.size(0);
  Tensor x2 = x.detach().reshape({-1, in});
  const int64_t n = x2.size(0);
  Tensor y = Tensor::empty({n, out_features}, x.dtype(), x.device());
  Tensor pre = act == Activation::GELU ? Tensor::empty({n, out_features}, x.dtype(), x.device()) : Tensor();
  if (narrow) cuda::narrow_linear_forward(x2, w, b, y);
  else cuda::linear_forward(x2, w, b, act, y, pre);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor result = y.reshape(out_shape);
  if (!needs_grad({&x, &w, &b})) return result;
  Tensor saved = act == Activation::GELU ? pre : act == Activation::ReLU ? y : Tensor();
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.requires_grad();
  return record("linear", result, {x, w, b},
                [x2, w = w.detach(), saved, act, narrow, gx, gw, gb, x_shape = x.shape()](const Tensor& g) {
                  Tensor dy = g.reshape({x2.size(0), w.size(0)});
                  // Straight into the parameters' f32 gradient views when they have them.
                  const GradOutput dw = grad_output(1, gw, w.shape(), w.dtype(), w.device());
                  const GradOutput db = grad_output(2, gb, {w.size(0)}, w.dtype(), w.device());
                  if (narrow) {
                    // dW and db in one pass over x, straight into their views (no accumulate
                    // kernels after); dx is the matmul primitive's.
                    cuda::narrow_linear_backward_params(dy, x2, dw, db);
                    return std::vector<Tensor>{gx ? matmul(dy, w).reshape(x_shape) : Tensor(), dw.tensor, db.tensor};
                  }
                  Tensor dx = gx ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  cuda::linear_backward(dy, x2, w, act, saved, dx, dw, db);
                  return std::vector<Tensor>{gx ? dx.reshape(x_shape) : Tensor(), dw.tensor, db.tensor};
                });
}

}  // namespace

Tensor linear_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  Tensor y = matmul(x, weight, false, true);
  if (bias.defined()) y = y + bias;
  return activate(y, act);
}

namespace {
LinearFusion& pinned_fusion() {
  static LinearFusion fusion = LinearFusion::Auto;
  return fusion;
}
}  // namespace

void set_linear_fusion(LinearFusion fusion) { pinned_fusion() = fusion; }
LinearFusion linear_fusion() { return pinned_fusion(); }

LinearFusion linear_fusion_for(int64_t, int64_t, int64_t, Activation) {
  // ft-bench ops on the H100 (docs/performance.md): the epilogue path was faster on every shape
  // measured (GPT-2 fc and proj, the MLP's layers, with and without GELU), by 2% to 55%.
  return LinearFusion::Epilogue;
}

namespace {

/// The one place that picks linear()'s path; linear() runs it and linear_takes_epilogue_path
/// reports it.
enum class LinearPath { Composite, Narrow, Epilogue, BiasAct };
LinearPath linear_path(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  const bool fused_dtype = x.dtype() == DType::BF16 || x.dtype() == DType::F32;
  if (!use_fused(x) || !fused_dtype || x.numel() == 0) return LinearPath::Composite;
  if (act == Activation::None && bias.defined() && cuda::narrow_linear_supported(x, weight)) return LinearPath::Narrow;
  LinearFusion fusion = linear_fusion();
  if (fusion == LinearFusion::Auto)
    fusion = linear_fusion_for(x.numel() / x.size(-1), weight.size(1), weight.size(0), act);
  return fusion == LinearFusion::Epilogue && fused_supported(x, weight, bias, act) ? LinearPath::Epilogue
                                                                                  : LinearPath::BiasAct;
}

}  // namespace

bool linear_takes_epilogue_path(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  return linear_path(x, weight, bias, act) == LinearPath::Epilogue;
}

GradOutput bias_sums_target(BiasGradHandoff& handoff, int64_t out, Device device) {
  if (completes_input_gradient(0)) {
    const GradOutput view = claim_leaf_grad_view(handoff.bias);
    if (view.defined()) {
      handoff.written = view.tensor;
      return view;
    }
  }
  handoff.sums = Tensor::empty({out}, DType::F32, device);
  return GradOutput(handoff.sums);
}

std::vector<Tensor> linear_backward_with_handoff(const Tensor& g, const Tensor& x2, const Tensor& w,
                                                 BiasGradHandoff& handoff, bool want_x, bool want_w, bool want_b,
                                                 const Shape& x_shape) {
  const Tensor dy = g.reshape({x2.size(0), w.size(0)});
  const GradOutput dw = grad_output(1, want_w, w.shape(), w.dtype(), w.device());
  const bool identical = g.impl() == handoff.grad.impl();
  // A claimed view was written on the promise that g would be that gradient (completes_input_gradient).
  FT_CHECK(!handoff.written.defined() || identical, "linear backward: the bias gradient view was written from a "
           "gradient that later contributions changed");
  const bool summed = want_b && (handoff.sums.defined() || handoff.written.defined()) && identical;
  const Tensor sums = summed ? handoff.sums : Tensor(), written = summed ? handoff.written : Tensor();
  const Tensor bias = handoff.bias;  // kept for a backward of a retained graph
  handoff = BiasGradHandoff{};
  handoff.bias = bias;
  const GradOutput db = want_b && !summed ? grad_output(2, true, {w.size(0)}, w.dtype(), w.device()) : GradOutput();
  Tensor dx = want_x ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
  cuda::linear_backward(dy, x2, w, Activation::None, Tensor(), dx, dw, db);
  // The sums are f32: an f32 gradient view takes them as they are (autograd adds them in, one
  // small kernel), anything else in b's dtype.
  const Tensor dbias = !want_b                         ? Tensor()
                       : !summed                       ? db.tensor
                       : written.defined()             ? written
                       : grad_target(2).view.defined() ? sums
                                                       : sums.to(w.dtype());
  return {want_x ? dx.reshape(x_shape) : Tensor(), dw.tensor, dbias};
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  check_linear_inputs(x, weight, bias);
  switch (linear_path(x, weight, bias, act)) {
    case LinearPath::Composite: return linear_composite(x, weight, bias, act);
    case LinearPath::Narrow: return linear_fused(x, weight, bias, act, true);
    case LinearPath::Epilogue: return linear_fused(x, weight, bias, act, false);
    case LinearPath::BiasAct: break;
  }
  return bias_act(matmul(x, weight, false, true), bias, act);
}

}  // namespace ft
