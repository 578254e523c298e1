#include "lib/ops/lora_linear.h"

#include <cmath>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/matmul.h"

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

Tensor lora_linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                         const Tensor& lora_b, const LoRAOptions& options) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.detach().reshape({-1, in});
  const Tensor y = Tensor::empty({x2.size(0), out}, x.dtype(), x.device());
  const Tensor w = weight.detach(), a = lora_a.detach(), b = lora_b.detach();
  const Tensor bias_values = bias.defined() ? bias.detach() : Tensor();
  const cuda::LoRASaved saved = cuda::lora_linear_forward(x2, w, bias_values, a, b, options, y);
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor result = y.reshape(out_shape);
  if (!needs_grad({&x, &bias, &lora_a, &lora_b})) return result;
  const bool gx = x.requires_grad(), ga = lora_a.requires_grad(), gb = lora_b.requires_grad();
  const bool gbias = bias.defined() && bias.requires_grad();
  return record("lora_linear", result, {x, weight, bias, lora_a, lora_b},
                [x2, w, a, b, options, saved, gx, ga, gb, gbias, x_shape = x.shape()](const Tensor& g) {
                  const Tensor dy = g.reshape({x2.size(0), w.size(0)});
                  const Tensor dx = gx ? Tensor::empty(x2.shape(), x2.dtype(), x2.device()) : Tensor();
                  // Straight into the adapters' f32 gradient views when they have them.
                  const GradOutput da = grad_output(3, ga, a.shape(), a.dtype(), a.device());
                  const GradOutput db = grad_output(4, gb, b.shape(), b.dtype(), b.device());
                  const GradOutput dbias = grad_output(2, gbias, {w.size(0)}, w.dtype(), w.device());
                  cuda::lora_linear_backward(dy, x2, w, a, b, options, saved, dx, da, db, dbias);
                  return std::vector<Tensor>{gx ? dx.reshape(x_shape) : Tensor(), Tensor(), dbias.tensor, da.tensor,
                                             db.tensor};
                });
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
  if (!fused_supported(x, weight, options)) return lora_linear_composite(x, weight, bias, lora_a, lora_b, options);
  return lora_linear_fused(x, weight, bias, lora_a, lora_b, options);
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
  if (weight.is_cuda() && (weight.dtype() == DType::BF16 || weight.dtype() == DType::F32)) {
    cuda::lora_merge(weight.detach(), lora_a.detach(), lora_b.detach(), scale, out.detach());
    return;
  }
  // Anywhere else: in f64, rounded once.
  const Tensor sum = cast(weight.detach(), DType::F64) +
                     matmul(cast(lora_b.detach(), DType::F64), cast(lora_a.detach(), DType::F64)) * scale;
  out.detach().copy_(sum);
}

}  // namespace ft
