// linear_cross_entropy's fused path (CUDA builds only): chunk by chunk, the logits product, the loss
// kernel that turns the logits into dlogits in place, and both gradient products, so the [N, V]
// logits never exist whole; backward only scales by the upstream gradient.
#include <algorithm>
#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/cross_entropy/cross_entropy_cuda.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy_cuda.h"
#include "lib/ops/matmul/matmul_cuda.h"

namespace ft::cuda {

Tensor linear_cross_entropy_fused(const Tensor& x, const Tensor& weight, const Tensor& targets,
                                  const CrossEntropyOptions& options, int64_t chunk_rows) {
  const int64_t n = x.size(0), c = x.size(1), vocab = weight.size(0);
  const Device device = x.device();
  Tensor count = Tensor::empty({1}, DType::F32, device);
  cross_entropy_count(targets, vocab, options.ignore_index, count);
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
    matmul(xc, weight, logits, 1, rows, vocab, c, false, true, false);
    // The chunk's logits become its dlogits in place, then feed both gradient products.
    cross_entropy_forward(logits, targets.narrow(0, r0, rows), options, count, loss, r0 > 0,
                          want_x || want_w ? logits : Tensor());
    if (want_x) matmul(logits, weight, dx.narrow(0, r0, rows), 1, rows, c, vocab, false, false, false);
    if (want_w) matmul(logits, xc, dw, 1, vocab, c, rows, true, false, false, r0 > 0);
  }
  Tensor out = loss.reshape({});
  if (!want_x && !want_w) return out;
  auto consumed = std::make_shared<bool>(false);
  return record("linear_cross_entropy", out, {x, weight}, [dx, dw, consumed](const Tensor& g) {
    FT_CHECK(!*consumed, "linear_cross_entropy (fused): backward ran twice through one forward; its gradients are "
                         "scaled in place, so retain_graph is not supported here");
    *consumed = true;
    const Tensor upstream = is_unit_seed(g) ? Tensor() : ft::cast(g, DType::F32).reshape({1});
    if (dx.defined() && upstream.defined()) scale_by_upstream(dx, upstream);
    // dW was summed over the chunks during forward; an f32 gradient view takes it (scaled) in
    // one pass, and no bf16 gradient is handed to autograd to add.
    const GradTarget w_target = dw.defined() ? grad_target(1) : GradTarget{};
    if (w_target.view.defined() && w_target.view.is_cuda()) {
      ft::accumulate_into(w_target.view, dw, w_target.overwrite, upstream);
      return std::vector<Tensor>{dx, w_target.view};
    }
    if (dw.defined() && upstream.defined()) scale_by_upstream(dw, upstream);
    return std::vector<Tensor>{dx, dw};
  });
}

}  // namespace ft::cuda
