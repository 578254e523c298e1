#include "lib/ops/reduce/reduce.h"

#include <limits>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce_cuda.h"

namespace ft {

namespace {

Shape keepdim_shape(const Shape& shape) {
  Shape s = shape;
  s.back() = 1;
  return s;
}

Tensor reduce_last_raw(ReduceOp op, const Tensor& x) {
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  FT_CHECK(cols > 0 || op != ReduceOp::Max, "max: cannot reduce an empty last dim of shape ", shape_str(x.shape()));
  Tensor out = Tensor::empty(keepdim_shape(x.shape()), x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kCudaBuild)
      if (rows > 0) cuda::reduce_last(op, x, out, rows, cols);
    return out;
  }
  cpu::dispatch_floating(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    // A row's sum in double: an f32 running sum over 10^5 elements is off by ~1e-5 (a gradient
    // norm, a loss), where the GPU's tree of partial sums is not.
    using A = double;
    const T* in = x.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      A acc = op == ReduceOp::Max ? -std::numeric_limits<A>::infinity() : A(0);
      for (int64_t c = 0; c < cols; ++c) {
        const A v = cpu::load(in, r * cols + c);
        acc = op == ReduceOp::Max ? (v > acc || v != v ? v : acc) : acc + v;
      }
      cpu::store(o, r, op == ReduceOp::Mean ? acc / static_cast<A>(cols) : acc);
    }
  });
  return out;
}

Tensor reduce_middle_raw(const Tensor& x, int64_t outer, int64_t mid, int64_t inner) {
  Tensor out = Tensor::empty({outer * inner}, x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kCudaBuild)
      if (outer * inner > 0) cuda::reduce_middle(x, out, outer, mid, inner);
    return out;
  }
  cpu::dispatch_floating(x.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    using A = cpu::acc_t<T>;
    const T* in = x.data<T>();
    T* o = out.data<T>();
    std::vector<A> acc(static_cast<size_t>(inner));
    for (int64_t b = 0; b < outer; ++b) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t m = 0; m < mid; ++m)
        for (int64_t i = 0; i < inner; ++i) acc[static_cast<size_t>(i)] += cpu::load(in, (b * mid + m) * inner + i);
      for (int64_t i = 0; i < inner; ++i) cpu::store(o, b * inner + i, acc[static_cast<size_t>(i)]);
    }
  });
  return out;
}

}  // namespace

Tensor reduce_last(ReduceOp op, const Tensor& x, bool keepdim) {
  check_defined(x, "reduce", "input");
  FT_CHECK(x.dim() >= 1, "reduce: expected at least one dim, got a scalar");
  Tensor out = reduce_last_raw(op, x);
  Shape dropped(x.shape().begin(), x.shape().end() - 1);
  if (!keepdim) out = out.detach().reshape(dropped);
  if (!needs_grad({&x})) return out;
  const Shape kept = keepdim_shape(x.shape());
  const int64_t cols = x.size(-1);
  Tensor sx = op == ReduceOp::Max ? x.detach() : Tensor();
  Tensor so = op == ReduceOp::Max ? out.detach().reshape(kept) : Tensor();
  return record(op == ReduceOp::Sum ? "sum" : op == ReduceOp::Mean ? "mean" : "max", out, {x},
                [op, kept, cols, shape = x.shape(), sx, so](const Tensor& g) {
                  Tensor gk = expand(g.reshape(kept), shape);
                  if (op == ReduceOp::Mean) gk = affine(gk, 1.0 / static_cast<double>(cols), 0.0);
                  if (op == ReduceOp::Max) gk = mul(gk, cast(eq(sx, so), sx.dtype()));
                  return std::vector<Tensor>{gk};
                });
}

Tensor sum(const Tensor& x, bool keepdim) { return reduce_last(ReduceOp::Sum, x, keepdim); }
Tensor mean(const Tensor& x, bool keepdim) { return reduce_last(ReduceOp::Mean, x, keepdim); }
Tensor max(const Tensor& x, bool keepdim) { return reduce_last(ReduceOp::Max, x, keepdim); }

Tensor sum_all(const Tensor& x) {
  check_defined(x, "sum_all", "input");
  return sum(x.reshape({x.numel()}), false);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined(x, "sum_to", "input");
  if (x.shape() == shape) return x;
  const Shape& in = x.shape();
  FT_CHECK(shape.size() <= in.size(), "sum_to: cannot sum ", shape_str(in), " to the larger ", shape_str(shape));
  // Left-pad the target with 1s, then reduce each run of dims where the target is 1 and the
  // input is not, one [outer, mid, inner] pass per run.
  Shape target(in.size() - shape.size(), 1);
  target.insert(target.end(), shape.begin(), shape.end());
  for (size_t d = 0; d < in.size(); ++d)
    FT_CHECK(target[d] == in[d] || target[d] == 1, "sum_to: ", shape_str(in), " does not broadcast from ",
             shape_str(shape));
  Tensor cur = x.detach();
  Shape cur_shape = in;
  size_t d = 0;
  while (d < cur_shape.size()) {
    if (!(target[d] == 1 && cur_shape[d] != 1)) {
      ++d;
      continue;
    }
    size_t end = d;
    while (end < cur_shape.size() && target[end] == 1) ++end;
    int64_t outer = 1, mid = 1, inner = 1;
    for (size_t k = 0; k < d; ++k) outer *= cur_shape[k];
    for (size_t k = d; k < end; ++k) mid *= cur_shape[k];
    for (size_t k = end; k < cur_shape.size(); ++k) inner *= cur_shape[k];
    if (inner == 1) {
      cur = reduce_last_raw(ReduceOp::Sum, cur.reshape({outer, mid}));
    } else {
      cur = reduce_middle_raw(cur, outer, mid, inner);
    }
    for (size_t k = d; k < end; ++k) cur_shape[k] = 1;
    cur = cur.reshape(cur_shape);
    d = end;
  }
  Tensor out = cur.reshape(shape);
  if (!needs_grad({&x})) return out;
  return record("sum_to", out, {x}, [in](const Tensor& g) { return std::vector<Tensor>{expand(g, in)}; });
}

}  // namespace ft
