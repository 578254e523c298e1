#include "lib/ops/dropout/dropout.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/dropout/dropout_cuda.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random.h"

namespace ft {

namespace {

void check_dropout(const char* op, const Tensor& x, double p, const Tensor& offset) {
  check_defined(x, op, "x");
  check_philox_offset(op, x, offset);
  FT_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
}

bool fused_ok(const Tensor& x, double p) {
  return use_fused(x) && (x.dtype() == DType::F32 || x.dtype() == DType::BF16) && x.numel() > 0 && p > 0.0 &&
         p < 1.0;
}

}  // namespace

void check_philox_offset(const char* op, const Tensor& x, const Tensor& offset) {
  check_defined(offset, op, "offset");
  FT_CHECK(offset.dtype() == DType::I64 && offset.numel() == 1 && offset.device() == x.device(), op,
           ": offset must be one i64 element on ", x.device().str(), ", got ", dtype_name(offset.dtype()), " ",
           shape_str(offset.shape()), " on ", offset.device().str());
}

Tensor dropout_composite(const Tensor& x, double p, uint64_t seed, const Tensor& offset) {
  if (p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Tensor uniform = philox_uniform(x.shape(), seed, offset, UniformDraw::DropoutHalfWord);
  Tensor keep = cast(ge(uniform, scalar_like(uniform, p)), x.dtype());
  return x * keep * (1.0 / (1.0 - p));
}

Tensor bias_dropout_add_composite(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                                  uint64_t seed, const Tensor& offset) {
  return residual + dropout_composite(bias.defined() ? x + bias : x, p, seed, offset);
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  check_defined(x, "dropout", "x");
  return dropout(x, p, seed, philox_offset(offset, x.device()));
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, const Tensor& offset) {
  return bias_dropout_add(x, Tensor(), Tensor(), p, seed, offset);
}

Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                        const Tensor& offset) {
  check_dropout("bias_dropout_add", x, p, offset);
  if (bias.defined())
    FT_CHECK(bias.shape() == Shape{x.size(-1)} && bias.dtype() == x.dtype() && bias.device() == x.device(),
             "bias_dropout_add: bias must be [", x.size(-1), "] ", dtype_name(x.dtype()), ", got ",
             shape_str(bias.shape()), " ", dtype_name(bias.dtype()));
  if (residual.defined())
    FT_CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype() && residual.device() == x.device(),
             "bias_dropout_add: residual must match x ", shape_str(x.shape()), " ", dtype_name(x.dtype()), ", got ",
             shape_str(residual.shape()), " ", dtype_name(residual.dtype()));
  if constexpr (kCudaBuild)
    if (fused_ok(x, p)) return cuda::bias_dropout_add_fused(x, bias, residual, p, seed, offset);
  Tensor y = dropout_composite(bias.defined() ? x + bias : x, p, seed, offset);
  return residual.defined() ? residual + y : y;
}

}  // namespace ft
