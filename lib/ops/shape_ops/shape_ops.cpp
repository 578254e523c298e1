#include "lib/ops/shape_ops/shape_ops.h"

#include <cstring>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/shape_ops/shape_ops_cuda.h"

namespace ft {

namespace {

Tensor view_of(const Tensor& x, const Shape& shape, size_t extra_byte_offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->byte_offset = x.impl()->byte_offset + extra_byte_offset;
  impl->shape = shape;
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

int64_t normalize_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t k = d < 0 ? d + ndim : d;
  FT_CHECK(k >= 0 && k < ndim, op, ": dim ", d, " out of range for ", ndim, " dims");
  return k;
}

struct Split {  // a shape seen as [outer, size(d), inner] around dim d
  int64_t outer = 1, inner = 1;
};
Split split_at(const Shape& s, int64_t d) {
  Split r;
  for (int64_t k = 0; k < d; ++k) r.outer *= s[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(d) + 1; k < s.size(); ++k) r.inner *= s[k];
  return r;
}

}  // namespace

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
               Device device) {
  if (rows == 0 || row_bytes == 0) return;
  if (device.is_cuda()) {
    if constexpr (kCudaBuild) cuda::copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    return;
  }
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape", "input");
  Shape s = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      FT_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      FT_CHECK(s[i] >= 0, "reshape: negative dim in ", shape_str(shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    FT_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot reshape ", shape_str(x.shape()), " to ",
             shape_str(shape));
    s[static_cast<size_t>(infer)] = x.numel() / known;
  }
  FT_CHECK(shape_numel(s) == x.numel(), "reshape: ", shape_str(x.shape()), " (", x.numel(), " elements) to ",
           shape_str(shape), " (", shape_numel(s), " elements)");
  Tensor out = view_of(x, s, 0);
  if (!needs_grad({&x})) return out;
  return record("reshape", out, {x}, [from = x.shape()](const Tensor& g) { return std::vector<Tensor>{g.reshape(from)}; });
}

Tensor transpose(const Tensor& x) {
  check_defined(x, "transpose", "input");
  FT_CHECK(x.dim() >= 2, "transpose: needs at least 2 dims, got ", shape_str(x.shape()));
  const int64_t rows = x.size(-2), cols = x.size(-1), batch = x.numel() / std::max<int64_t>(1, rows * cols);
  Shape s = x.shape();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  if (out.numel() > 0) {
    if (x.is_cuda()) {
      if constexpr (kCudaBuild) cuda::transpose_last2(x, out, batch, rows, cols);
    } else {
      cpu::dispatch_all(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* in = x.data<T>();
        T* o = out.data<T>();
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) o[(b * cols + c) * rows + r] = in[(b * rows + r) * cols + c];
      });
    }
  }
  if (!needs_grad({&x})) return out;
  return record("transpose", out, {x}, [](const Tensor& g) { return std::vector<Tensor>{transpose(g)}; });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow", "input");
  const int64_t d = normalize_dim("narrow", dim, x.dim());
  const int64_t size = x.size(d);
  FT_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: [", start, ", ", start + length,
           ") out of range for dim ", d, " of size ", size, " in ", shape_str(x.shape()));
  Shape s = x.shape();
  s[static_cast<size_t>(d)] = length;
  const Split sp = split_at(x.shape(), d);
  const size_t es = dtype_size(x.dtype());
  Tensor out;
  if (sp.outer == 1) {
    out = view_of(x, s, static_cast<size_t>(start * sp.inner) * es);
  } else {
    out = Tensor::empty(s, x.dtype(), x.device());
    copy_rows(out.data_ptr(), static_cast<size_t>(length * sp.inner) * es,
              static_cast<const char*>(x.data_ptr()) + static_cast<size_t>(start * sp.inner) * es,
              static_cast<size_t>(size * sp.inner) * es, static_cast<size_t>(length * sp.inner) * es,
              static_cast<size_t>(sp.outer), x.device());
  }
  if (!needs_grad({&x})) return out;
  return record("narrow", out, {x}, [shape = x.shape(), d, start, sp, es](const Tensor& g) {
    // The gradient is g placed into zeros at [start, start + length).
    Tensor full = Tensor::zeros(shape, g.dtype(), g.device());
    const int64_t size = shape[static_cast<size_t>(d)], length = g.size(d);
    copy_rows(static_cast<char*>(full.data_ptr()) + static_cast<size_t>(start * sp.inner) * es,
              static_cast<size_t>(size * sp.inner) * es, g.data_ptr(), static_cast<size_t>(length * sp.inner) * es,
              static_cast<size_t>(length * sp.inner) * es, static_cast<size_t>(sp.outer), g.device());
    return std::vector<Tensor>{full};
  });
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  FT_CHECK(!xs.empty(), "cat: no tensors given");
  for (const Tensor& x : xs) check_defined(x, "cat", "input");
  const Tensor& first = xs.front();
  const int64_t d = normalize_dim("cat", dim, first.dim());
  Shape s = first.shape();
  int64_t total = 0;
  for (const Tensor& x : xs) {
    Shape a = x.shape(), b = first.shape();
    FT_CHECK(a.size() == b.size(), "cat: ", shape_str(a), " and ", shape_str(b), " differ in rank");
    a[static_cast<size_t>(d)] = b[static_cast<size_t>(d)] = 0;
    FT_CHECK(a == b && x.dtype() == first.dtype() && x.device() == first.device(), "cat: ", shape_str(x.shape()), " ",
             dtype_name(x.dtype()), " on ", x.device().str(), " does not match ", shape_str(first.shape()), " ",
             dtype_name(first.dtype()), " on ", first.device().str(), " outside dim ", d);
    total += x.size(d);
  }
  s[static_cast<size_t>(d)] = total;
  Tensor out = Tensor::empty(s, first.dtype(), first.device());
  const Split sp = split_at(s, d);
  const size_t es = dtype_size(first.dtype());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.size(d);
    copy_rows(static_cast<char*>(out.data_ptr()) + static_cast<size_t>(at * sp.inner) * es,
              static_cast<size_t>(total * sp.inner) * es, x.data_ptr(), static_cast<size_t>(len * sp.inner) * es,
              static_cast<size_t>(len * sp.inner) * es, static_cast<size_t>(sp.outer), first.device());
    at += len;
  }
  bool any = false;
  for (const Tensor& x : xs) any = any || needs_grad({&x});
  if (!any) return out;
  std::vector<int64_t> lengths;
  for (const Tensor& x : xs) lengths.push_back(x.size(d));
  return record("cat", out, xs, [d, lengths](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t len : lengths) {
      grads.push_back(narrow(g, d, at, len));
      at += len;
    }
    return grads;
  });
}

Tensor gather_rows(const Tensor& table, const Tensor& ids) {
  check_defined(table, "gather_rows", "table");
  check_defined(ids, "gather_rows", "ids");
  FT_CHECK(table.dim() == 2, "gather_rows: table must be [V, C], got ", shape_str(table.shape()));
  FT_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "gather_rows: ids must be i32 or i64, got ",
           dtype_name(ids.dtype()));
  FT_CHECK(ids.device() == table.device(), "gather_rows: ids on ", ids.device().str(), ", table on ",
           table.device().str());
  const int64_t rows = table.size(0), cols = table.size(1), n = ids.numel();
  Shape s = ids.shape();
  s.push_back(cols);
  Tensor out = Tensor::empty(s, table.dtype(), table.device());
  if (table.is_cuda()) {
    if constexpr (kCudaBuild)
      if (n > 0) cuda::gather_rows(table, ids, out);
  } else {
    const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(table.dtype());
    cpu::dispatch_all(ids.dtype(), [&](auto tag) {
      using I = decltype(tag);
      if constexpr (std::is_integral_v<I>) {
        const I* p = ids.data<I>();
        for (int64_t i = 0; i < n; ++i) {
          const int64_t id = static_cast<int64_t>(p[i]);
          FT_CHECK(id >= 0 && id < rows, "gather_rows: id ", id, " at position ", i, " is out of range [0, ", rows, ")");
          std::memcpy(static_cast<char*>(out.data_ptr()) + static_cast<size_t>(i) * row_bytes,
                      static_cast<const char*>(table.data_ptr()) + static_cast<size_t>(id) * row_bytes, row_bytes);
        }
      }
    });
  }
  if (!needs_grad({&table})) return out;
  return record("gather_rows", out, {table, Tensor()}, [sids = ids.detach(), rows, cols](const Tensor& g) {
    Tensor table_grad = Tensor::zeros({rows, cols}, g.dtype(), g.device());
    if (g.is_cuda()) {
      if constexpr (kCudaBuild)
        if (sids.numel() > 0) cuda::scatter_add_rows(g, sids, table_grad);
    } else {
      cpu::dispatch_floating(g.dtype(), "gather_rows backward", [&](auto tag) {
        using T = decltype(tag);
        cpu::dispatch_all(sids.dtype(), [&](auto itag) {
          using I = decltype(itag);
          if constexpr (std::is_integral_v<I>) {
            const I* p = sids.data<I>();
            const T* pg = g.data<T>();
            T* pt = table_grad.data<T>();
            for (int64_t i = 0; i < sids.numel(); ++i)
              for (int64_t c = 0; c < cols; ++c) {
                const int64_t at = static_cast<int64_t>(p[i]) * cols + c;
                cpu::store(pt, at, cpu::load(pt, at) + cpu::load(pg, i * cols + c));
              }
          }
        });
      });
    }
    return std::vector<Tensor>{table_grad, Tensor()};
  });
}

RowPermutation RowPermutation::of(const std::vector<int64_t>& order, Device device) {
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<double> forward(order.size()), inverse(order.size(), -1.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = order[static_cast<size_t>(i)];
    FT_CHECK(at >= 0 && at < n && inverse[static_cast<size_t>(at)] < 0, "RowPermutation: entry ", i, " (", at,
             ") is outside [0, ", n, ") or repeats an earlier one: not a permutation");
    inverse[static_cast<size_t>(at)] = static_cast<double>(i);
    forward[static_cast<size_t>(i)] = static_cast<double>(at);
  }
  return {Tensor::from_vector(forward, {n}, DType::I64).to(device), Tensor::from_vector(inverse, {n}, DType::I64).to(device)};
}

Tensor permute_rows(const Tensor& x, const RowPermutation& p) {
  check_defined(x, "permute_rows", "x");
  FT_CHECK(x.dim() == 2, "permute_rows: x must be [n, C], got ", shape_str(x.shape()));
  FT_CHECK(p.order.defined() && p.inverse.defined() && p.order.numel() == x.size(0) && p.inverse.numel() == x.size(0),
           "permute_rows: the permutation orders ", p.order.defined() ? p.order.numel() : 0, " rows, x has ", x.size(0));
  const Tensor out = gather_rows(x.detach(), p.order);
  if (!needs_grad({&x})) return out;
  return record("permute_rows", out, {x}, [inverse = p.inverse](const Tensor& g) {
    return std::vector<Tensor>{gather_rows(g, inverse)};
  });
}

Tensor gather_last(const Tensor& x, const Tensor& ids) {
  check_defined(x, "gather_last", "x");
  check_defined(ids, "gather_last", "ids");
  FT_CHECK(x.dim() >= 1 && ids.shape() == Shape(x.shape().begin(), x.shape().end() - 1), "gather_last: ids ",
           shape_str(ids.shape()), " must be x's shape ", shape_str(x.shape()), " without its last dim");
  FT_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "gather_last: ids must be i32 or i64, got ",
           dtype_name(ids.dtype()));
  FT_CHECK(ids.device() == x.device(), "gather_last: ids on ", ids.device().str(), ", x on ", x.device().str());
  const int64_t cols = x.size(-1), rows = ids.numel();
  Tensor out = Tensor::empty(ids.shape(), x.dtype(), x.device());
  // The CPU loops, here and in backward: an id, and one element moved at its width.
  const auto id_at = [](const Tensor& t, int64_t r) -> int64_t {
    return t.dtype() == DType::I64 ? t.data<int64_t>()[r] : t.data<int32_t>()[r];
  };
  const auto copy_element = [](const Tensor& dst, int64_t to, const Tensor& src, int64_t from) {
    const size_t element = dtype_size(src.dtype());
    std::memcpy(static_cast<char*>(dst.data_ptr()) + static_cast<size_t>(to) * element,
                static_cast<const char*>(src.data_ptr()) + static_cast<size_t>(from) * element, element);
  };
  if (x.is_cuda()) {
    if constexpr (kCudaBuild)
      if (rows > 0) cuda::gather_last(x, ids, out);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t id = id_at(ids, r);
      FT_CHECK(id >= 0 && id < cols, "gather_last: id ", id, " at row ", r, " is out of range [0, ", cols, ")");
      copy_element(out, r, x, r * cols + id);
    }
  }
  if (!needs_grad({&x})) return out;
  return record("gather_last", out, {x, Tensor()}, [sids = ids.detach(), shape = x.shape(), id_at, copy_element](const Tensor& g) {
    Tensor dx = Tensor::zeros(shape, g.dtype(), g.device());
    const int64_t cols = shape.back(), rows = sids.numel();
    if (g.is_cuda()) {
      if constexpr (kCudaBuild)
        if (rows > 0) cuda::put_last(g, sids, dx);
    } else {
      for (int64_t r = 0; r < rows; ++r) copy_element(dx, r * cols + id_at(sids, r), g, r);
    }
    return std::vector<Tensor>{dx, Tensor()};
  });
}

// ---- Tensor's view methods (declared in lib/tensor.h), which are these ops

Tensor Tensor::reshape(const Shape& new_shape) const { return ft::reshape(*this, new_shape); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const { return ft::narrow(*this, d, start, length); }
Tensor Tensor::transpose() const { return ft::transpose(*this); }

}  // namespace ft
