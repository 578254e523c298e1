#include "lib/ops/linear/linear.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/matmul/matmul.h"

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
  // The epilogue path was faster than matmul + bias_act on every shape ft-bench ops measured
  // (GPT-2's fc and proj, the MLP's layers, with and without GELU; docs/history/performance-log.md).
  return LinearFusion::Epilogue;
}

namespace {

/// The one place that picks linear()'s path; linear() runs it and linear_takes_epilogue_path
/// reports it.
enum class LinearPath { Composite, Narrow, Epilogue, BiasAct };
LinearPath linear_path(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  const bool fused_dtype = x.dtype() == DType::BF16 || x.dtype() == DType::F32;
  if (!use_fused(x) || !fused_dtype || x.numel() == 0) return LinearPath::Composite;
  // Without a bias or an activation there is nothing to fuse: the product alone (the twin) is
  // the whole op, where bias_act would add a copy of the output and a pass over its gradient.
  if (!bias.defined() && act == Activation::None) return LinearPath::Composite;
  if constexpr (kCudaBuild)
    if (act == Activation::None && bias.defined() && cuda::narrow_linear_supported(x, weight))
      return LinearPath::Narrow;
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

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  check_linear_inputs(x, weight, bias);
  const LinearPath path = linear_path(x, weight, bias, act);
  if constexpr (kCudaBuild)
    if (path == LinearPath::Narrow || path == LinearPath::Epilogue)
      return cuda::linear_fused(x, weight, bias, act, path == LinearPath::Narrow);
  if (path == LinearPath::BiasAct) return bias_act(matmul(x, weight, false, true), bias, act);
  return linear_composite(x, weight, bias, act);
}

}  // namespace ft
