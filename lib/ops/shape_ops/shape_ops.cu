// Data-movement kernels: transpose of the last two dims (tiled through shared memory), pitched
// row copies (narrow, cat), row gather/scatter for embeddings, and one element a row picked by
// id (gather_last, cross-entropy's twin).
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/indexed_rows.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/shape_ops/shape_ops_cuda.h"

namespace ft::cuda {

namespace {

constexpr int kTile = 32;

template <class Word>
__global__ void transpose_kernel(const Word* x, Word* out, int64_t rows, int64_t cols) {
  begin_dependent_kernel();
  __shared__ Word tile[kTile][kTile + 1];  // +1 avoids bank conflicts on the column read
  const int64_t b = blockIdx.z;
  const Word* in = x + b * rows * cols;
  Word* o = out + b * rows * cols;
  const int64_t r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int64_t r = r0 + dy, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[dy][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
    const int64_t c = c0 + dy, r = r0 + threadIdx.x;
    if (r < rows && c < cols) o[c * rows + r] = tile[threadIdx.x][dy];
  }
}

template <class Word>
void launch_transpose(const void* x, void* out, int64_t batch, int64_t rows, int64_t cols) {
  dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile),
            static_cast<unsigned>(batch));
  launch_dependent(transpose_kernel<Word>, grid, dim3(kTile, 8), 0, static_cast<const Word*>(x),
                   static_cast<Word*>(out), rows, cols);
}

template <class T>
__global__ void scatter_add_rows_kernel(const T* grad, const void* ids, bool ids64, T* table_grad, int64_t n,
                                        int64_t rows, int64_t cols) {
  begin_dependent_kernel();
  const int64_t total = n * cols;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = j / cols, c = j % cols;
    const int64_t id = load_id(ids, ids64, i);
    if (id >= 0 && id < rows) atomicAdd(table_grad + id * cols + c, grad[j]);
  }
}

// One element a row, picked by id (gather_last), and its gradient put back (put_last). Elements
// move as words of their width.
template <class Word>
__global__ void gather_last_kernel(const Word* x, const void* ids, bool ids64, Word* out, int64_t rows, int64_t cols,
                                   unsigned* error_word) {
  begin_dependent_kernel();
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
    const int64_t id = load_id(ids, ids64, r);
    if (id < 0 || id >= cols) {
      atomicOr(error_word, kIndexOutOfRange);
      out[r] = Word{};
    } else {
      out[r] = x[r * cols + id];
    }
  }
}

template <class Word>
__global__ void put_last_kernel(const Word* values, const void* ids, bool ids64, Word* dst, int64_t rows, int64_t cols) {
  begin_dependent_kernel();
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
    const int64_t id = load_id(ids, ids64, r);
    if (id >= 0 && id < cols) dst[r * cols + id] = values[r];
  }
}

__global__ void validate_ids_kernel(const void* ids, bool ids64, int64_t n, int64_t limit, int64_t allowed,
                                    unsigned code, unsigned* error_word) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t id = load_id(ids, ids64, i);
    if ((id < 0 || id >= limit) && id != allowed) atomicOr(error_word, code);
  }
}

}  // namespace

void validate_ids(const Tensor& ids, int64_t limit, int64_t allowed, unsigned code) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  launch_dependent(validate_ids_kernel, elementwise_blocks(n, kThreads), kThreads, 0, ids.data_ptr(),
                   ids.dtype() == DType::I64, n, limit, allowed, code, device_error_word());
  FT_CUDA_CHECK_LAUNCH("validate_ids_kernel");
}

void transpose_last2(const Tensor& x, const Tensor& out, int64_t batch, int64_t rows, int64_t cols) {
  FT_CHECK(batch <= 65535, "transpose: batch ", batch, " exceeds the grid limit 65535");
  dispatch_word(x.dtype(), [&](auto word) {
    launch_transpose<decltype(word)>(x.data_ptr(), out.data_ptr(), batch, rows, cols);
  });
  FT_CUDA_CHECK_LAUNCH("transpose_kernel");
}

void gather_last(const Tensor& x, const Tensor& ids, const Tensor& out) {
  const int64_t cols = x.size(-1), rows = ids.numel();
  dispatch_word(x.dtype(), [&](auto word) {
    using Word = decltype(word);
    launch_dependent(gather_last_kernel<Word>, elementwise_blocks(rows, kThreads), kThreads, 0,
                     static_cast<const Word*>(x.data_ptr()), ids.data_ptr(), ids.dtype() == DType::I64,
                     static_cast<Word*>(out.data_ptr()), rows, cols, device_error_word());
  });
  FT_CUDA_CHECK_LAUNCH("gather_last_kernel");
}

void put_last(const Tensor& values, const Tensor& ids, const Tensor& dst) {
  const int64_t cols = dst.size(-1), rows = ids.numel();
  dispatch_word(dst.dtype(), [&](auto word) {
    using Word = decltype(word);
    launch_dependent(put_last_kernel<Word>, elementwise_blocks(rows, kThreads), kThreads, 0,
                     static_cast<const Word*>(values.data_ptr()), ids.data_ptr(), ids.dtype() == DType::I64,
                     static_cast<Word*>(dst.data_ptr()), rows, cols);
  });
  FT_CUDA_CHECK_LAUNCH("put_last_kernel");
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  FT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, stream()));
}

void gather_rows(const Tensor& table, const Tensor& ids, const Tensor& out) {
  const size_t row_bytes = static_cast<size_t>(table.size(1)) * dtype_size(table.dtype());
  move_indexed_rows<RowMove::Gather>(table.data_ptr(), table.size(0), ids.data_ptr(), ids.numel(),
                                     ids.dtype() == DType::I64, out.data_ptr(), row_bytes);
}

void scatter_add_rows(const Tensor& grad, const Tensor& ids, const Tensor& table_grad) {
  const int64_t n = ids.numel(), rows = table_grad.size(0), cols = table_grad.size(1);
  const bool ids64 = ids.dtype() == DType::I64;
  dispatch_floating(grad.dtype(), "gather_rows backward", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(scatter_add_rows_kernel<T>, elementwise_blocks(n * cols, kThreads), kThreads, 0, grad.data<T>(),
                     ids.data_ptr(), ids64, table_grad.data<T>(), n, rows, cols);
  });
  FT_CUDA_CHECK_LAUNCH("scatter_add_rows_kernel");
}

}  // namespace ft::cuda
