// Row primitives of the embedding bag's twin (lib/ops/sparse_rows/sparse_rows.h): each one simple kernel,
// one thread per bag or per element, as an eager framework runs them. The fused embedding bag
// (lib/ops/embedding_bag/embedding_bag.cu) shares bag_rows and does the rest in its own kernels.
#include "lib/ops/sparse_rows/sparse_rows_cuda.h"

#include "lib/cuda/bags.cuh"
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/indexed_rows.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

namespace {

__global__ void bag_rows_kernel(const void* ids, bool ids64, const void* offsets, bool offsets64,
                                const int64_t* row_offsets, int64_t tables, int64_t bags, int64_t n, int32_t* rows,
                                int32_t* bag_of, unsigned* error_word) {
  begin_dependent_kernel();
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < bags; k += (int64_t)gridDim.x * blockDim.x) {
    const BagRange range = bag_range(offsets, offsets64, k, bags, n, error_word);
    for (int64_t i = range.begin; i < range.end; ++i) {
      rows[i] = static_cast<int32_t>(bag_row(ids, ids64, i, row_offsets, k % tables, error_word));
      bag_of[i] = static_cast<int32_t>(k);
    }
  }
}

template <class T>
__global__ void segment_sum_kernel(const T* x, const void* offsets, bool offsets64, bool mean, T* out,
                                   int64_t segments, int64_t cols) {
  begin_dependent_kernel();
  const int64_t total = segments * cols;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = j / cols, c = j % cols;
    const int64_t begin = load_id(offsets, offsets64, k), end = load_id(offsets, offsets64, k + 1);
    acc_t<T> sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += to_acc(x[i * cols + c]);
    if (mean && end > begin) sum /= static_cast<acc_t<T>>(end - begin);
    out[j] = from_acc<T>(sum);
  }
}

template <class T>
__global__ void segment_spread_kernel(const T* grad, const void* offsets, bool offsets64, const int32_t* bags,
                                      bool mean, T* dx, int64_t n, int64_t cols) {
  begin_dependent_kernel();
  const int64_t total = n * cols;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = j / cols, c = j % cols, k = bags[i];
    acc_t<T> g = to_acc(grad[k * cols + c]);
    if (mean) g /= static_cast<acc_t<T>>(load_id(offsets, offsets64, k + 1) - load_id(offsets, offsets64, k));
    dx[j] = from_acc<T>(g);
  }
}

}  // namespace

void bag_rows(const Tensor& ids, const Tensor& offsets, const Tensor& row_offsets, const Tensor& rows,
              const Tensor& bags) {
  const int64_t count = offsets.numel() - 1;
  if (count == 0) return;
  launch_dependent(bag_rows_kernel, elementwise_blocks(count, kThreads), kThreads, 0, ids.data_ptr(),
                   ids.dtype() == DType::I64, offsets.data_ptr(), offsets.dtype() == DType::I64,
                   row_offsets.data<int64_t>(), row_offsets.numel() - 1, count, ids.numel(), rows.data<int32_t>(),
                   bags.data<int32_t>(), device_error_word());
  FT_CUDA_CHECK_LAUNCH("bag_rows_kernel");
}

void segment_sum(const Tensor& x, const Tensor& offsets, bool mean, const Tensor& out) {
  const int64_t segments = out.size(0), cols = out.size(1);
  dispatch_floating(x.dtype(), "segment_sum", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(segment_sum_kernel<T>, elementwise_blocks(segments * cols, kThreads), kThreads, 0, x.data<T>(),
                     offsets.data_ptr(), offsets.dtype() == DType::I64, mean, out.data<T>(), segments, cols);
  });
  FT_CUDA_CHECK_LAUNCH("segment_sum_kernel");
}

void segment_spread(const Tensor& grad, const Tensor& offsets, const Tensor& bags, bool mean, const Tensor& dx) {
  const int64_t n = dx.size(0), cols = dx.size(1);
  dispatch_floating(grad.dtype(), "segment_sum backward", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(segment_spread_kernel<T>, elementwise_blocks(n * cols, kThreads), kThreads, 0, grad.data<T>(),
                     offsets.data_ptr(), offsets.dtype() == DType::I64, bags.data<int32_t>(), mean, dx.data<T>(), n,
                     cols);
  });
  FT_CUDA_CHECK_LAUNCH("segment_spread_kernel");
}

void index_put_rows(const Tensor& dst, const Tensor& ids, const Tensor& src) {
  const size_t row_bytes = static_cast<size_t>(dst.size(1)) * dtype_size(dst.dtype());
  move_indexed_rows<RowMove::Put>(dst.data_ptr(), dst.size(0), ids.data_ptr(), ids.numel(), ids.dtype() == DType::I64,
                                  src.data_ptr(), row_bytes);
}

}  // namespace ft::cuda
