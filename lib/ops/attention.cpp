#include "lib/ops/attention.h"

#include <cmath>
#include <limits>

#include "lib/error.h"
#include "lib/ops/dropout.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/matmul.h"
#include "lib/ops/reduce.h"

namespace ft {

Tensor softmax(const Tensor& x) {
  check_defined(x, "softmax", "x");
  Tensor shifted = exp(x - max(x, true).detach());
  return shifted / sum(shifted, true);
}

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                           uint64_t seed, const Tensor& offset) {
  const int64_t t = q.size(-2), hs = q.size(-1);
  // The scores and their softmax are kept in f32 for bf16 inputs, as eager frameworks do.
  const DType compute = q.dtype() == DType::BF16 ? DType::F32 : q.dtype();
  Tensor scores = cast(matmul(q, k, false, true), compute) * (1.0 / std::sqrt(static_cast<double>(hs)));
  if (causal) {
    // Query i sees keys j <= i; the rest become -inf before the softmax, so they get probability 0.
    Tensor cols = Tensor::arange(t, DType::I64, q.device());
    Tensor visible = le(cols, cols.reshape({t, 1}));  // [T, T]
    scores = where(visible, scores, scalar_like(scores, -std::numeric_limits<double>::infinity()));
  }
  Tensor probs = softmax(scores);
  if (dropout_p > 0.0) probs = dropout_composite(probs, dropout_p, seed, offset);
  return matmul(cast(probs, q.dtype()), v);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p, uint64_t seed,
                 const Tensor& offset) {
  check_defined(q, "attention", "q");
  check_defined(k, "attention", "k");
  check_defined(v, "attention", "v");
  FT_CHECK(q.dim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(), "attention: q, k, v must share one ",
           "[B, NH, T, HS] shape, got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  FT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() && v.device() == q.device(),
           "attention: q, k, v must share dtype and device");
  FT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "attention: dropout_p must be in [0, 1), got ", dropout_p);
  FT_CHECK(dropout_p == 0.0 || offset.defined(), "attention: dropout needs a Philox offset tensor");
  return attention_composite(q, k, v, causal, dropout_p, seed, offset);
}

}  // namespace ft
