#include "lib/ops/lora_linear/lora_linear.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/lora_linear/lora_linear_cuda.h"
#include "lib/ops/matmul/matmul.h"

namespace ft {

namespace {

void check_same(const Tensor& t, const Tensor& x, const char* what) {
  FT_CHECK(t.dtype() == x.dtype() && t.device() == x.device(), "lora_linear: ", what, " is ", dtype_name(t.dtype()),
           " on ", t.device().str(), ", x is ", dtype_name(x.dtype()), " on ", x.device().str());
}

void check_adapter(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, const char* op) {
  check_defined(weight, op, "weight");
  check_defined(lora_a, op, "lora_A");
  check_defined(lora_b, op, "lora_B");
  FT_CHECK(weight.dim() == 2, op, ": weight must be [OUT, IN], got ", shape_str(weight.shape()));
  const int64_t out = weight.size(0), in = weight.size(1);
  FT_CHECK(lora_a.dim() == 2 && lora_a.size(1) == in, op, ": lora_A must be [r, ", in, "] for weight ",
           shape_str(weight.shape()), ", got ", shape_str(lora_a.shape()));
  const int64_t r = lora_a.size(0);
  FT_CHECK(r >= 1, op, ": the rank r must be at least 1, got lora_A ", shape_str(lora_a.shape()));
  FT_CHECK(r <= std::min(in, out), op, ": the rank r = ", r, " exceeds min(IN, OUT) = ", std::min(in, out),
           " of weight ", shape_str(weight.shape()));
  FT_CHECK(lora_b.shape() == (Shape{out, r}), op, ": lora_B must be [", out, ", ", r, "] for weight ",
           shape_str(weight.shape()), " and lora_A ", shape_str(lora_a.shape()), ", got ", shape_str(lora_b.shape()));
}

void check_inputs(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                  const Tensor& lora_b, const LoRAOptions& options) {
  check_defined(x, "lora_linear", "x");
  check_adapter(weight, lora_a, lora_b, "lora_linear");
  FT_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "lora_linear: x ", shape_str(x.shape()),
           " does not end in IN = ", weight.size(1), " of weight ", shape_str(weight.shape()));
  check_same(weight, x, "weight");
  check_same(lora_a, x, "lora_A");
  check_same(lora_b, x, "lora_B");
  if (bias.defined()) {
    FT_CHECK(bias.shape() == Shape{weight.size(0)}, "lora_linear: bias must be [", weight.size(0), "], got ",
             shape_str(bias.shape()));
    check_same(bias, x, "bias");
  }
  FT_CHECK(std::isfinite(options.scale), "lora_linear: the scale must be finite, got ", options.scale);
  FT_CHECK(options.dropout >= 0.0 && options.dropout < 1.0, "lora_linear: dropout must be in [0, 1), got ",
           options.dropout);
  if (options.dropout > 0.0) check_philox_offset("lora_linear", x, options.offset);
}

bool fused_supported(const Tensor& x, const Tensor& weight, const LoRAOptions& options) {
  const bool act_ok = options.activation == Activation::None || options.activation == Activation::ReLU ||
                      options.activation == Activation::GELU;
  return use_fused(x) && (x.dtype() == DType::BF16 || x.dtype() == DType::F32) && x.numel() > 0 && act_ok &&
         !weight.requires_grad();
}

}  // namespace

Tensor lora_linear_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                             const Tensor& lora_b, const LoRAOptions& options) {
  const Tensor adapter_input =
      options.dropout > 0.0 ? dropout_composite(x, options.dropout, options.seed, options.offset) : x;
  const Tensor low_rank = matmul(matmul(adapter_input, lora_a, false, true), lora_b, false, true);
  Tensor pre = matmul(x, weight, false, true) + low_rank * options.scale;
  if (bias.defined()) pre = pre + bias;
  return activate(pre, options.activation);
}

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                   const Tensor& lora_b, const LoRAOptions& options) {
  check_inputs(x, weight, bias, lora_a, lora_b, options);
  if constexpr (kCudaBuild)
    if (fused_supported(x, weight, options)) return cuda::lora_linear_fused(x, weight, bias, lora_a, lora_b, options);
  return lora_linear_composite(x, weight, bias, lora_a, lora_b, options);
}

void lora_merge(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, double scale, const Tensor& out) {
  check_adapter(weight, lora_a, lora_b, "lora_merge");
  FT_CHECK(lora_a.dtype() == weight.dtype() && lora_b.dtype() == weight.dtype() && lora_a.device() == weight.device() &&
               lora_b.device() == weight.device(),
           "lora_merge: weight, lora_A and lora_B must share dtype and device, got ", dtype_name(weight.dtype()), ", ",
           dtype_name(lora_a.dtype()), ", ", dtype_name(lora_b.dtype()));
  FT_CHECK(out.shape() == weight.shape() && out.dtype() == weight.dtype() && out.device() == weight.device(),
           "lora_merge: out must match weight ", shape_str(weight.shape()));
  NoGradGuard no_grad;
  if constexpr (kCudaBuild) {
    if (weight.is_cuda() && (weight.dtype() == DType::BF16 || weight.dtype() == DType::F32)) {
      cuda::lora_merge(weight.detach(), lora_a.detach(), lora_b.detach(), scale, out.detach());
      return;
    }
  }
  // Anywhere else: in f64, rounded once.
  const Tensor sum = cast(weight.detach(), DType::F64) +
                     matmul(cast(lora_b.detach(), DType::F64), cast(lora_a.detach(), DType::F64)) * scale;
  out.detach().copy_(sum);
}

}  // namespace ft
