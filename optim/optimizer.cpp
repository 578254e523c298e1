#include "optim/optimizer.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/reduce.h"

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

}  // namespace ft
