#include "lib/ops/row_block/row_block.h"

#include <type_traits>

#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/ops/row_block/row_block_cuda.h"
#include "lib/runtime.h"

namespace ft {

namespace {

void check_bounds(const Tensor& bounds, const char* name, const Tensor& ids) {
  check_defined(bounds, "row_block_ids", name);
  FT_CHECK(bounds.dtype() == DType::I64 && bounds.shape() == (Shape{ids.size(1)}), "row_block_ids: ", name,
           " must be i64 [", ids.size(1), "], got ", dtype_name(bounds.dtype()), " ", shape_str(bounds.shape()));
  FT_CHECK(bounds.device() == ids.device(), "row_block_ids: ", name, " on ", bounds.device().str(), ", ids on ",
           ids.device().str());
}

template <class I, class W>
void row_block_cpu(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin, const Tensor& block_rows,
                   const RowBlockIds& out) {
  const int64_t tables = ids.size(1), n = ids.numel();
  const I* in = ids.data<I>();
  const int64_t *rows = table_rows.data<int64_t>(), *begin = block_begin.data<int64_t>(),
                *size = block_rows.data<int64_t>();
  I* local = out.ids.data<I>();
  W* weights = out.weights.data<W>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % tables, id = static_cast<int64_t>(in[i]);
    FT_CHECK(id >= 0 && id < rows[t], "row_block_ids: id ", id, " of sample ", i / tables, " is outside table ", t,
             "'s ", rows[t], " rows");
    const int64_t at = id - begin[t];
    const bool mine = at >= 0 && at < size[t];
    local[i] = static_cast<I>(mine ? at : id % size[t]);
    cpu::store(weights, i, mine ? 1.0 : 0.0);
  }
}

}  // namespace

RowBlockIds row_block_ids(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin,
                          const Tensor& block_rows, DType weight_dtype) {
  check_defined(ids, "row_block_ids", "ids");
  FT_CHECK((ids.dtype() == DType::I32 || ids.dtype() == DType::I64) && ids.dim() == 2,
           "row_block_ids: ids must be i32 or i64 [N, T], got ", dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  check_bounds(table_rows, "table_rows", ids);
  check_bounds(block_begin, "block_begin", ids);
  check_bounds(block_rows, "block_rows", ids);
  RowBlockIds out{Tensor::empty(ids.shape(), ids.dtype(), ids.device()),
                  Tensor::empty({ids.numel()}, weight_dtype, ids.device())};
  if (ids.is_cuda()) {
    if constexpr (kCudaBuild) cuda::row_block_ids(ids, table_rows, block_begin, block_rows, out);
    return out;
  }
  cpu::dispatch_floating(weight_dtype, "row_block_ids", [&](auto wtag) {
    using W = decltype(wtag);
    if (ids.dtype() == DType::I64)
      row_block_cpu<int64_t, W>(ids, table_rows, block_begin, block_rows, out);
    else
      row_block_cpu<int32_t, W>(ids, table_rows, block_begin, block_rows, out);
  });
  return out;
}

}  // namespace ft
