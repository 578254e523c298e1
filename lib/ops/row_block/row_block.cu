// One thread an id: its table's block bounds come from three [T] arrays that stay in L1.
#include <cuda_bf16.h>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/row_block/row_block_cuda.h"

namespace ft::cuda {

namespace {

template <class I, class W>
__global__ void row_block_kernel(const I* ids, const int64_t* table_rows, const int64_t* block_begin,
                                 const int64_t* block_rows, I* local, W* weights, int64_t n, int tables,
                                 unsigned* error_word) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int t = static_cast<int>(i % tables);
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= table_rows[t]) atomicOr(error_word, kIndexOutOfRange);
    const int64_t at = id - block_begin[t];
    const bool mine = at >= 0 && at < block_rows[t];
    // A bad id, reported above, still gets a valid row: the lookups run before the report is read.
    local[i] = static_cast<I>(mine ? at : id >= 0 ? id % block_rows[t] : 0);
    weights[i] = static_cast<W>(mine ? 1.0f : 0.0f);
  }
}

template <class I, class W>
void launch(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin, const Tensor& block_rows,
            const RowBlockIds& out) {
  const int64_t n = ids.numel();
  launch_dependent(row_block_kernel<I, W>, elementwise_blocks(n, kThreads), kThreads, 0, ids.data<I>(),
                   table_rows.data<int64_t>(), block_begin.data<int64_t>(), block_rows.data<int64_t>(),
                   out.ids.data<I>(), out.weights.data<W>(), n, static_cast<int>(ids.size(1)), device_error_word());
}

template <class I>
void launch_for_ids(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin, const Tensor& block_rows,
                    const RowBlockIds& out) {
  if (out.weights.dtype() == DType::BF16)
    launch<I, __nv_bfloat16>(ids, table_rows, block_begin, block_rows, out);
  else
    launch<I, float>(ids, table_rows, block_begin, block_rows, out);
}

}  // namespace

void row_block_ids(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin, const Tensor& block_rows,
                   const RowBlockIds& out) {
  FT_CHECK(out.weights.dtype() == DType::F32 || out.weights.dtype() == DType::BF16,
           "row_block_ids: CUDA weights must be f32 or bf16, got ", dtype_name(out.weights.dtype()));
  if (ids.numel() == 0) return;
  if (ids.dtype() == DType::I64)
    launch_for_ids<int64_t>(ids, table_rows, block_begin, block_rows, out);
  else
    launch_for_ids<int32_t>(ids, table_rows, block_begin, block_rows, out);
  FT_CUDA_CHECK_LAUNCH("row_block_kernel");
}

}  // namespace ft::cuda
