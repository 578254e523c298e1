#include "lib/ops/linear_cross_entropy.h"

#include <memory>

#include "lib/autograd.h"
#include "lib/cuda/launchers.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/matmul.h"

namespace ft {

Tensor linear_cross_entropy_composite(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                      CrossEntropyOptions options) {
  return cross_entropy(matmul(x, weight, false, true), targets, options);
}

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets,
                            CrossEntropyOptions options, int64_t chunk_rows) {
  check_defined(x, "linear_cross_entropy", "x");
  check_defined(weight, "linear_cross_entropy", "weight");
  FT_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear_cross_entropy: x must be [N, C] ",
           "and weight [V, C], got ", shape_str(x.shape()), " and ", shape_str(weight.shape()));
  FT_CHECK(x.dtype() == weight.dtype() && x.device() == weight.device(), "linear_cross_entropy: x is ",
           dtype_name(x.dtype()), " on ", x.device().str(), ", weight ", dtype_name(weight.dtype()), " on ",
           weight.device().str());
  FT_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be positive, got ", chunk_rows);
  // Checked before the projection, so bad targets fail before any [N, V] work.
  check_cross_entropy_inputs("linear_cross_entropy", x, weight.size(0), targets, options.ignore_index);
  const bool fused_dtype = x.dtype() == DType::F32 || x.dtype() == DType::BF16;
  if (!use_fused(x) || !fused_dtype || x.numel() == 0) return linear_cross_entropy_composite(x, weight, targets, options);
  const int64_t n = x.size(0), c = x.size(1), vocab = weight.size(0);
  const Device device = x.device();
  Tensor count = Tensor::empty({1}, DType::F32, device);
  cuda::cross_entropy_count(targets, vocab, options.ignore_index, count);
  Tensor loss = Tensor::empty({1}, DType::F32, device);
  const bool want_x = needs_grad({&x}), want_w = needs_grad({&weight});
  Tensor dx = want_x ? Tensor::empty({n, c}, x.dtype(), device) : Tensor();
  Tensor dw = want_w ? Tensor::empty({vocab, c}, x.dtype(), device) : Tensor();
  const int64_t chunk = std::min(chunk_rows, n);
  Tensor logits_buffer = Tensor::empty({chunk, vocab}, x.dtype(), device);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    Tensor xc = x.detach().narrow(0, r0, rows);
    Tensor logits = logits_buffer.narrow(0, 0, rows);
    cuda::matmul(xc, weight, logits, 1, rows, vocab, c, false, true, false);
    // The chunk's logits become its dlogits in place, then feed both gradient products.
    cuda::cross_entropy_forward(logits, targets.narrow(0, r0, rows), options, count, loss, r0 > 0,
                                want_x || want_w ? logits : Tensor());
    if (want_x) cuda::matmul(logits, weight, dx.narrow(0, r0, rows), 1, rows, c, vocab, false, false, false);
    if (want_w) cuda::matmul(logits, xc, dw, 1, vocab, c, rows, true, false, false, r0 > 0);
  }
  Tensor out = loss.reshape({});
  if (!want_x && !want_w) return out;
  auto consumed = std::make_shared<bool>(false);
  return record("linear_cross_entropy", out, {x, weight}, [dx, dw, consumed](const Tensor& g) {
    FT_CHECK(!*consumed, "linear_cross_entropy (fused): backward ran twice through one forward; its gradients are "
                         "scaled in place, so retain_graph is not supported here");
    *consumed = true;
    const Tensor upstream = is_unit_seed(g) ? Tensor() : cast(g, DType::F32).reshape({1});
    if (dx.defined() && upstream.defined()) cuda::scale_by_upstream(dx, upstream);
    // dW was summed over the chunks during forward; an f32 gradient view takes it (scaled) in
    // one pass, and no bf16 gradient is handed to autograd to add.
    const GradTarget w_target = dw.defined() ? grad_target(1) : GradTarget{};
    if (w_target.view.defined() && w_target.view.is_cuda()) {
      accumulate_into(w_target.view, dw, w_target.overwrite, upstream);
      return std::vector<Tensor>{dx, w_target.view};
    }
    if (dw.defined() && upstream.defined()) cuda::scale_by_upstream(dw, upstream);
    return std::vector<Tensor>{dx, dw};
  });
}

}  // namespace ft
