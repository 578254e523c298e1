#include "lib/ops/sparse_rows/sparse_rows.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/shape_ops/shape_ops_cuda.h"
#include "lib/ops/sparse_rows/sparse_rows_cuda.h"
#include "lib/runtime.h"

namespace ft {

namespace {

bool is_index(DType dtype) { return dtype == DType::I32 || dtype == DType::I64; }

/// The ids of an i32/i64 CPU tensor, widened.
std::vector<int64_t> ids_of(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::I32) {
    const int32_t* p = t.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    const int64_t* p = t.data<int64_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

void check_segments(const char* op, const Tensor& x, const Tensor& offsets, const Tensor& bags) {
  check_defined(x, op, "x");
  check_defined(offsets, op, "offsets");
  check_defined(bags, op, "bags");
  FT_CHECK(x.dim() == 2 && offsets.dim() == 1 && offsets.numel() >= 1 && bags.dim() == 1 && bags.numel() == x.size(0),
           op, ": x must be [N, D], offsets [S + 1] and bags [N], got ", shape_str(x.shape()), ", ",
           shape_str(offsets.shape()), " and ", shape_str(bags.shape()));
  FT_CHECK(is_index(offsets.dtype()) && bags.dtype() == DType::I32, op, ": offsets must be i32 or i64 and bags i32, got ",
           dtype_name(offsets.dtype()), " and ", dtype_name(bags.dtype()));
  FT_CHECK(x.device() == offsets.device() && x.device() == bags.device(), op, ": x, offsets and bags must share a device");
}

void check_row_update(const char* op, const Tensor& dst, const Tensor& ids, const Tensor& src) {
  check_defined(dst, op, "dst");
  check_defined(ids, op, "ids");
  check_defined(src, op, "src");
  FT_CHECK(dst.dim() == 2 && ids.dim() == 1 && src.dim() == 2 && src.size(0) == ids.numel() && src.size(1) == dst.size(1),
           op, ": dst must be [R, D], ids [N] and src [N, D], got ", shape_str(dst.shape()), ", ", shape_str(ids.shape()),
           " and ", shape_str(src.shape()));
  FT_CHECK(is_index(ids.dtype()) && src.dtype() == dst.dtype(), op, ": ids must be i32 or i64 and src of dst's dtype (",
           dtype_name(dst.dtype()), "), got ", dtype_name(ids.dtype()), " and ", dtype_name(src.dtype()));
  FT_CHECK(dst.device() == ids.device() && dst.device() == src.device(), op, ": dst, ids and src must share a device");
}

/// Runs f(i, row) for every id with its row checked against [0, rows).
template <class F>
void for_each_row(const char* op, const Tensor& ids, int64_t rows, F&& f) {
  const std::vector<int64_t> v = ids_of(ids);
  for (size_t i = 0; i < v.size(); ++i) {
    FT_CHECK(v[i] >= 0 && v[i] < rows, op, ": id ", v[i], " at position ", i, " is out of range [0, ", rows, ")");
    f(static_cast<int64_t>(i), v[i]);
  }
}

Tensor segment_spread(const Tensor& grad, const Tensor& offsets, const Tensor& bags, bool mean) {
  const int64_t n = bags.numel(), d = grad.size(1);
  Tensor dx = Tensor::empty({n, d}, grad.dtype(), grad.device());
  if (n == 0) return dx;
  if (grad.is_cuda()) {
    if constexpr (kCudaBuild) cuda::segment_spread(grad, offsets, bags, mean, dx);
    return dx;
  }
  const std::vector<int64_t> off = ids_of(offsets);
  const int32_t* bag = bags.data<int32_t>();
  cpu::dispatch_floating(grad.dtype(), "segment_sum backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data<T>();
    T* out = dx.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = bag[i], size = off[static_cast<size_t>(k) + 1] - off[static_cast<size_t>(k)];
      const cpu::acc_t<T> scale = mean ? cpu::acc_t<T>(1) / static_cast<cpu::acc_t<T>>(size) : cpu::acc_t<T>(1);
      for (int64_t c = 0; c < d; ++c) cpu::store(out, i * d + c, cpu::load(g, k * d + c) * scale);
    }
  });
  return dx;
}

}  // namespace

BagRows bag_rows(const Tensor& ids, const Tensor& offsets, const Tensor& row_offsets) {
  check_defined(ids, "bag_rows", "ids");
  check_defined(offsets, "bag_rows", "offsets");
  check_defined(row_offsets, "bag_rows", "row_offsets");
  FT_CHECK(ids.dim() == 1 && is_index(ids.dtype()), "bag_rows: ids must be i32 or i64 [N], got ", shape_str(ids.shape()),
           " ", dtype_name(ids.dtype()));
  FT_CHECK(offsets.dim() == 1 && offsets.numel() >= 1 && is_index(offsets.dtype()),
           "bag_rows: offsets must be i32 or i64 [S + 1], got ", shape_str(offsets.shape()), " ",
           dtype_name(offsets.dtype()));
  FT_CHECK(row_offsets.dim() == 1 && row_offsets.numel() >= 2 && row_offsets.dtype() == DType::I64,
           "bag_rows: row_offsets must be i64 [T + 1] with T >= 1, got ", shape_str(row_offsets.shape()), " ",
           dtype_name(row_offsets.dtype()));
  const int64_t n = ids.numel(), bags_count = offsets.numel() - 1, tables = row_offsets.numel() - 1;
  // Rows are 32-bit (the fused backward sorts them as 32-bit keys); checked on the host copy
  // below, and by embedding_bag against the weight on any device.
  FT_CHECK(bags_count % tables == 0, "bag_rows: ", bags_count, " bags is not a multiple of ", tables, " tables");
  FT_CHECK(n < (int64_t{1} << 31) && bags_count < (int64_t{1} << 31), "bag_rows: ", n, " ids in ", bags_count,
           " bags exceed 32-bit positions");
  FT_CHECK(ids.device() == offsets.device() && ids.device() == row_offsets.device(),
           "bag_rows: ids, offsets and row_offsets must share a device");
  BagRows out{Tensor::empty({n}, DType::I32, ids.device()), Tensor::empty({n}, DType::I32, ids.device())};
  if (ids.is_cuda()) {
    if constexpr (kCudaBuild)
      if (n > 0) cuda::bag_rows(ids, offsets, row_offsets, out.rows, out.bags);
    return out;
  }
  const std::vector<int64_t> id = ids_of(ids), off = ids_of(offsets), table_start = ids_of(row_offsets);
  FT_CHECK(table_start.back() < (int64_t{1} << 31), "bag_rows: ", table_start.back(), " rows exceed 2^31");
  FT_CHECK(off.front() == 0 && off.back() == n, "bag_rows: offsets must start at 0 and end at ", n, " (the ids), got ",
           off.front(), " and ", off.back());
  int32_t* rows = out.rows.data<int32_t>();
  int32_t* bags = out.bags.data<int32_t>();
  for (int64_t k = 0; k < bags_count; ++k) {
    const size_t ku = static_cast<size_t>(k), t = static_cast<size_t>(k % tables);
    FT_CHECK(off[ku] <= off[ku + 1], "bag_rows: offsets decrease at bag ", k, " (", off[ku], " then ", off[ku + 1], ")");
    const int64_t limit = table_start[t + 1] - table_start[t];
    for (int64_t i = off[ku]; i < off[ku + 1]; ++i) {
      const int64_t v = id[static_cast<size_t>(i)];
      FT_CHECK(v >= 0 && v < limit, "bag_rows: id ", v, " at position ", i, " (table ", t, ") is out of range [0, ",
               limit, ")");
      rows[i] = static_cast<int32_t>(table_start[t] + v);
      bags[i] = static_cast<int32_t>(k);
    }
  }
  return out;
}

Tensor segment_sum(const Tensor& x, const Tensor& offsets, const Tensor& bags, bool mean) {
  check_segments("segment_sum", x, offsets, bags);
  const int64_t segments = offsets.numel() - 1, d = x.size(1);
  Tensor out = Tensor::empty({segments, d}, x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kCudaBuild)
      if (segments > 0) cuda::segment_sum(x, offsets, mean, out);
  } else {
    const std::vector<int64_t> off = ids_of(offsets);
    cpu::dispatch_floating(x.dtype(), "segment_sum", [&](auto tag) {
      using T = decltype(tag);
      using A = cpu::acc_t<T>;
      const T* px = x.data<T>();
      T* po = out.data<T>();
      std::vector<A> acc(static_cast<size_t>(d));
      for (int64_t k = 0; k < segments; ++k) {
        std::fill(acc.begin(), acc.end(), A(0));
        const int64_t begin = off[static_cast<size_t>(k)], end = off[static_cast<size_t>(k) + 1];
        for (int64_t i = begin; i < end; ++i)
          for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] += cpu::load(px, i * d + c);
        const A scale = mean && end > begin ? A(1) / static_cast<A>(end - begin) : A(1);
        for (int64_t c = 0; c < d; ++c) cpu::store(po, k * d + c, acc[static_cast<size_t>(c)] * scale);
      }
    });
  }
  if (!needs_grad({&x})) return out;
  return record("segment_sum", out, {x},
                [offsets = offsets.detach(), bags = bags.detach(), mean](const Tensor& g) {
                  return std::vector<Tensor>{segment_spread(g, offsets, bags, mean)};
                });
}

void index_add_rows_(const Tensor& dst, const Tensor& ids, const Tensor& src) {
  check_row_update("index_add_rows_", dst, ids, src);
  if (ids.numel() == 0) return;
  if (dst.is_cuda()) {
    if constexpr (kCudaBuild) {
      // The scatter skips rows out of range; flag them so that the next read raises.
      cuda::validate_ids(ids, dst.size(0), std::numeric_limits<int64_t>::min(), cuda::kIndexOutOfRange);
      cuda::scatter_add_rows(src, ids, dst);
    }
    return;
  }
  const int64_t d = dst.size(1);
  cpu::dispatch_floating(dst.dtype(), "index_add_rows_", [&](auto tag) {
    using T = decltype(tag);
    T* pd = dst.data<T>();
    const T* ps = src.data<T>();
    for_each_row("index_add_rows_", ids, dst.size(0), [&](int64_t i, int64_t row) {
      for (int64_t c = 0; c < d; ++c) cpu::store(pd, row * d + c, cpu::load(pd, row * d + c) + cpu::load(ps, i * d + c));
    });
  });
}

void index_put_rows_(const Tensor& dst, const Tensor& ids, const Tensor& src) {
  check_row_update("index_put_rows_", dst, ids, src);
  if (ids.numel() == 0) return;
  if (dst.is_cuda()) {
    if constexpr (kCudaBuild) cuda::index_put_rows(dst, ids, src);
    return;
  }
  const size_t row_bytes = static_cast<size_t>(dst.size(1)) * dtype_size(dst.dtype());
  char* pd = static_cast<char*>(dst.data_ptr());
  const char* ps = static_cast<const char*>(src.data_ptr());
  for_each_row("index_put_rows_", ids, dst.size(0), [&](int64_t i, int64_t row) {
    std::memcpy(pd + static_cast<size_t>(row) * row_bytes, ps + static_cast<size_t>(i) * row_bytes, row_bytes);
  });
}

}  // namespace ft
