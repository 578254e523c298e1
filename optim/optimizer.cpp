#include "optim/optimizer.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"
#include "lib/ops/elementwise.h"

namespace ft {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (const Tensor& p : params_) {
    check_defined(p, "Optimizer", "parameter");
    FT_CHECK(p.requires_grad() && !p.grad_fn(), "Optimizer: parameters must be leaf tensors that require grad");
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

Tensor grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    Tensor g = cast(p.grad(), p.grad().dtype() == DType::F64 ? DType::F64 : DType::F32);
    Tensor sq = sum_all(g * g);
    total = total.defined() ? total + sq : sq;
  }
  FT_CHECK(total.defined(), "grad_norm: no parameter has a gradient");
  return sqrt(total);
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  const Tensor norm = grad_norm(params);
  Tensor factor = pow(norm + 1e-6, -1.0) * max_norm;
  factor = where(lt(factor, scalar_like(factor, 1.0)), factor, scalar_like(factor, 1.0)).reshape({1});
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    const Tensor g = p.grad();
    g.assign_(g * cast(factor, g.dtype()));
  }
  return norm;
}

}  // namespace ft
