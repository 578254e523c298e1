#include "lib/ops/elementwise/elementwise.h"

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise_cuda.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/runtime/elements.h"

namespace ft {

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  FT_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ", shape_str(a.shape()),
           " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
  FT_CHECK(a.device() == b.device(), op, ": devices differ: ", a.device().str(), " vs ", b.device().str());
}

}  // namespace

BroadcastPlan broadcast_plan(const char* op, const Shape& out, const std::vector<const Shape*>& operands) {
  FT_CHECK(out.size() <= BroadcastPlan::kMaxDims, op, ": at most ", BroadcastPlan::kMaxDims, " dims, got ",
           shape_str(out));
  BroadcastPlan plan;
  plan.ndim = static_cast<int>(out.size());
  for (int d = 0; d < plan.ndim; ++d) plan.size[d] = out[static_cast<size_t>(d)];
  for (size_t k = 0; k < operands.size(); ++k) {
    const Shape& s = *operands[k];
    plan.same_shape[k] = s == out;
    int64_t stride = 1;
    const int pad = plan.ndim - static_cast<int>(s.size());
    for (int d = plan.ndim - 1; d >= 0; --d) {
      const int64_t size = d >= pad ? s[static_cast<size_t>(d - pad)] : 1;
      plan.stride[k][d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  plan.coalesce();
  return plan;
}

namespace {

Tensor unary_op(UnaryOp op, const Tensor& x, double p = 0, double q = 0) {
  check_defined(x, "unary op", "input");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kCudaBuild) cuda::unary(op, x, out, p, q);
    return out;
  }
  cpu::dispatch_floating(x.dtype(), "unary op", [&](auto tag) {
    using T = decltype(tag);
    using A = cpu::acc_t<T>;
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      cpu::store(o, i, apply_unary<A>(op, cpu::load(in, i), static_cast<A>(p), static_cast<A>(q)));
  });
  return out;
}

// out_shape, when given, may be larger than the operands' broadcast shape (expand uses it).
Tensor binary_op(const char* name, BinaryOp op, const Tensor& a, const Tensor& b, const Shape* out_shape = nullptr) {
  check_operands(name, a, b);
  const Shape shape = out_shape ? *out_shape : broadcast_shape(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const BroadcastPlan plan = broadcast_plan(name, shape, {&a.shape(), &b.shape()});
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) cuda::binary(op, a, b, out, plan);
    return out;
  }
  cpu::dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* o = out.data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      cpu::store(o, i, apply_binary(op, cpu::load(pa, plan.operand_index(0, i)), cpu::load(pb, plan.operand_index(1, i))));
  });
  return out;
}

// Saved tensors are detached: a node that held its own output with history would form a cycle.
Tensor saved(const Tensor& t) { return t.detach(); }

Tensor unary_with_grad(const char* name, UnaryOp op, const Tensor& x, double p, double q,
                       std::function<Tensor(const Tensor& g, const Tensor& x, const Tensor& out)> grad_fn,
                       bool save_x, bool save_out) {
  Tensor out = unary_op(op, x, p, q);
  if (!needs_grad({&x})) return out;
  Tensor sx = save_x ? saved(x) : Tensor();
  Tensor so = save_out ? saved(out) : Tensor();
  return record(name, out, {x}, [sx, so, grad_fn](const Tensor& g) { return std::vector<Tensor>{grad_fn(g, sx, so)}; });
}

}  // namespace

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    FT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor scalar_like(const Tensor& x, double value) { return Tensor::full({1}, value, x.dtype(), x.device()); }

Tensor neg(const Tensor& x) {
  return unary_with_grad("neg", UnaryOp::Neg, x, 0, 0, [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); },
                         false, false);
}
Tensor exp(const Tensor& x) {
  return unary_with_grad("exp", UnaryOp::Exp, x, 0, 0,
                         [](const Tensor& g, const Tensor&, const Tensor& out) { return mul(g, out); }, false, true);
}
Tensor log(const Tensor& x) {
  return unary_with_grad("log", UnaryOp::Log, x, 0, 0,
                         [](const Tensor& g, const Tensor& x, const Tensor&) { return div(g, x); }, true, false);
}
Tensor sqrt(const Tensor& x) {
  return unary_with_grad("sqrt", UnaryOp::Sqrt, x, 0, 0,
                         [](const Tensor& g, const Tensor&, const Tensor& out) { return div(g, affine(out, 2.0, 0.0)); },
                         false, true);
}
Tensor rsqrt(const Tensor& x) {
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
  return unary_with_grad("rsqrt", UnaryOp::Rsqrt, x, 0, 0,
                         [](const Tensor& g, const Tensor&, const Tensor& out) {
                           return mul(g, affine(pow(out, 3.0), -0.5, 0.0));
                         },
                         false, true);
}
Tensor tanh(const Tensor& x) {
  return unary_with_grad("tanh", UnaryOp::Tanh, x, 0, 0,
                         [](const Tensor& g, const Tensor&, const Tensor& out) {
                           return mul(g, affine(mul(out, out), -1.0, 1.0));
                         },
                         false, true);
}
Tensor relu(const Tensor& x) {
  return unary_with_grad("relu", UnaryOp::Relu, x, 0, 0,
                         [](const Tensor& g, const Tensor& x, const Tensor&) {
                           return mul(g, cast(gt(x, scalar_like(x, 0.0)), x.dtype()));
                         },
                         true, false);
}
Tensor erf(const Tensor& x) {
  // d/dx erf(x) = 2/√π · exp(-x²)
  return unary_with_grad("erf", UnaryOp::Erf, x, 0, 0,
                         [](const Tensor& g, const Tensor& x, const Tensor&) {
                           return mul(g, affine(exp(neg(mul(x, x))), 1.1283791670955126, 0.0));
                         },
                         true, false);
}
Tensor pow(const Tensor& x, double exponent) {
  return unary_with_grad("pow", UnaryOp::Pow, x, exponent, 0,
                         [exponent](const Tensor& g, const Tensor& x, const Tensor&) {
                           return mul(g, affine(pow(x, exponent - 1.0), exponent, 0.0));
                         },
                         true, false);
}
Tensor gelu(const Tensor& x) {
  return unary_with_grad("gelu", UnaryOp::GeluTanh, x, 0, 0,
                         [](const Tensor& g, const Tensor& x, const Tensor&) {
                           return binary_op("gelu backward", BinaryOp::GeluTanhGrad, x, g);
                         },
                         true, false);
}
Tensor affine(const Tensor& x, double scale, double shift) {
  return unary_with_grad("affine", UnaryOp::Affine, x, scale, shift,
                         [scale](const Tensor& g, const Tensor&, const Tensor&) { return affine(g, scale, 0.0); },
                         false, false);
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op("add", BinaryOp::Add, a, b);
  if (!needs_grad({&a, &b})) return out;
  return record("add", out, {a, b}, [sa = a.shape(), sb = b.shape(), ga = a.requires_grad(),
                                     gb = b.requires_grad()](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(g, sa) : Tensor(), gb ? sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op("sub", BinaryOp::Sub, a, b);
  if (!needs_grad({&a, &b})) return out;
  // A side that needs no gradient costs nothing (x - max(x).detach(): no pass over x for the max).
  return record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape(), ga = a.requires_grad(),
                                     gb = b.requires_grad()](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(g, sa) : Tensor(), gb ? sum_to(neg(g), sb) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op("mul", BinaryOp::Mul, a, b);
  if (!needs_grad({&a, &b})) return out;
  // Each side's gradient needs the other operand; save only what a needed gradient uses.
  Tensor sa = b.requires_grad() ? saved(a) : Tensor();
  Tensor sb = a.requires_grad() ? saved(b) : Tensor();
  return record("mul", out, {a, b}, [shape_a = a.shape(), shape_b = b.shape(), sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sb.defined() ? sum_to(mul(g, sb), shape_a) : Tensor(),
                               sa.defined() ? sum_to(mul(g, sa), shape_b) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_op("div", BinaryOp::Div, a, b);
  if (!needs_grad({&a, &b})) return out;
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  // d(a/b)/db = -a/b^2 = -out/b
  return record("div", out, {a, b},
                [shape_a = a.shape(), ga, gb, so = gb ? saved(out) : Tensor(), sb = saved(b)](const Tensor& g) {
                  Tensor g_over_b = div(g, sb);
                  return std::vector<Tensor>{ga ? sum_to(g_over_b, shape_a) : Tensor(),
                                             gb ? sum_to(neg(mul(g_over_b, so)), sb.shape()) : Tensor()};
                });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined(x, "expand", "input");
  if (x.shape() == shape) return x;
  FT_CHECK(broadcast_shape("expand", x.shape(), shape) == shape, "expand: ", shape_str(x.shape()),
           " does not broadcast to ", shape_str(shape));
  Tensor out = binary_op("expand", BinaryOp::Add, x, scalar_like(x, 0.0), &shape);
  if (!needs_grad({&x})) return out;
  return record("expand", out, {x}, [sx = x.shape()](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sx)}; });
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  check_operands("compare", a, b);
  const Shape shape = broadcast_shape("compare", a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, DType::U8, a.device());
  const BroadcastPlan plan = broadcast_plan("compare", shape, {&a.shape(), &b.shape()});
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) cuda::compare(op, a, b, out, plan);
    return out;
  }
  cpu::dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    uint8_t* o = out.data<uint8_t>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = apply_compare(op, cpu::load(pa, plan.operand_index(0, i)), cpu::load(pb, plan.operand_index(1, i)));
  });
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where", "cond");
  check_operands("where", a, b);
  FT_CHECK(cond.dtype() == DType::U8, "where: cond must be u8 (a comparison result), got ", dtype_name(cond.dtype()));
  FT_CHECK(cond.device() == a.device(), "where: cond is on ", cond.device().str(), ", values on ", a.device().str());
  const Shape shape = broadcast_shape("where", cond.shape(), broadcast_shape("where", a.shape(), b.shape()));
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const BroadcastPlan plan = broadcast_plan("where", shape, {&cond.shape(), &a.shape(), &b.shape()});
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) cuda::where(cond, a, b, out, plan);
  } else if (cond.numel() == 1 && a.shape() == shape && b.shape() == shape) {
    // One condition for the whole tensor (an optimizer's skip flag): a copy of the chosen
    // operand. The CPU reads its memory directly, so this branch costs no synchronization.
    out.copy_(cond.data<uint8_t>()[0] ? a.detach() : b.detach());
  } else {
    cpu::dispatch_all(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const uint8_t* pc = cond.data<uint8_t>();
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* o = out.data<T>();
      const int64_t n = out.numel();
#pragma omp parallel for if (n > 65536)
      for (int64_t i = 0; i < n; ++i)
        o[i] = pc[plan.operand_index(0, i)] ? pa[plan.operand_index(1, i)] : pb[plan.operand_index(2, i)];
    });
  }
  if (!needs_grad({&a, &b})) return out;
  // where(mask, scores, -inf): the constant's gradient would be a full pass and a sum over
  // [B, NH, T, T], so only the sides that need one get it.
  return record("where", out, {a, b}, [c = saved(cond), sa = a.shape(), sb = b.shape(), ga = a.requires_grad(),
                                       gb = b.requires_grad()](const Tensor& g) {
    Tensor zero = scalar_like(g, 0.0);
    return std::vector<Tensor>{ga ? sum_to(where(c, g, zero), sa) : Tensor(),
                               gb ? sum_to(where(c, zero, g), sb) : Tensor()};
  });
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast", "input");
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  runtime::convert_elements(out.data_ptr(), dtype, x.data_ptr(), x.dtype(), x.device(), x.numel());
  if (!is_floating(dtype) || !needs_grad({&x})) return out;
  return record("cast", out, {x}, [from = x.dtype()](const Tensor& g) { return std::vector<Tensor>{cast(g, from)}; });
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return affine(a, 1.0, b); }
Tensor operator-(const Tensor& a, double b) { return affine(a, 1.0, -b); }
Tensor operator*(const Tensor& a, double b) { return affine(a, b, 0.0); }
Tensor operator/(const Tensor& a, double b) { return affine(a, 1.0 / b, 0.0); }
Tensor operator+(double a, const Tensor& b) { return affine(b, 1.0, a); }
Tensor operator-(double a, const Tensor& b) { return affine(b, -1.0, a); }
Tensor operator*(double a, const Tensor& b) { return affine(b, a, 0.0); }

// Tensor::to(DType), declared in lib/tensor.h: the differentiable cast.
Tensor Tensor::to(DType target) const { return cast(*this, target); }

}  // namespace ft
