// Reduction kernels: one block per row for the last axis (a few long rows split over several
// blocks, then their partials combined); for a middle axis, the column kernel
// of row_map.cuh when there is no outer dim (a bias gradient: [rows, cols] to [cols]), else one
// thread per output (coalesced across the inner dim). Fixed summation order, so results are
// deterministic.
#include <algorithm>
#include <cfloat>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/partial_rows.cuh"
#include "lib/cuda/row_map.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/reduce/reduce_cuda.h"

namespace ft::cuda {

namespace {

template <class A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  if (op != ReduceOp::Max) return a + b;
  return (b > a || b != b) ? b : a;  // NaN wins, as in the CPU loop
}

template <class A>
__device__ A block_reduce(ReduceOp op, A value) {
  __shared__ A warp_results[32];
  for (int shift = 16; shift > 0; shift >>= 1) value = combine(op, value, __shfl_xor_sync(0xffffffffu, value, shift));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  const A identity = op == ReduceOp::Max ? A(-INFINITY) : A(0);
  value = lane < warps ? warp_results[lane] : identity;
  if (warp == 0)
    for (int shift = 16; shift > 0; shift >>= 1) value = combine(op, value, __shfl_xor_sync(0xffffffffu, value, shift));
  return value;  // valid in thread 0
}

template <class T>
__global__ void reduce_last_kernel(ReduceOp op, const T* x, T* out, int64_t cols) {
  begin_dependent_kernel();
  using A = acc_t<T>;
  const T* row = x + blockIdx.x * cols;
  A acc = op == ReduceOp::Max ? A(-INFINITY) : A(0);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc = combine(op, acc, to_acc(row[c]));
  acc = block_reduce(op, acc);
  if (threadIdx.x == 0) out[blockIdx.x] = from_acc<T>(op == ReduceOp::Mean ? acc / A(cols) : acc);
}

// A long row over several blocks (a sum over every element of a tensor, say): each block
// reduces one chunk of a row into an f32 (f64) partial, and reduce_partials_kernel combines a
// row's partials in a fixed order.
template <class T>
__global__ void reduce_chunks_kernel(ReduceOp op, const T* x, acc_t<T>* partials, int64_t cols, int64_t chunk) {
  begin_dependent_kernel();
  using A = acc_t<T>;
  const T* row = x + blockIdx.y * cols;
  const int64_t begin = blockIdx.x * chunk, end = begin + chunk < cols ? begin + chunk : cols;
  A acc = op == ReduceOp::Max ? A(-INFINITY) : A(0);
  for (int64_t c = begin + threadIdx.x; c < end; c += blockDim.x) acc = combine(op, acc, to_acc(row[c]));
  acc = block_reduce(op, acc);
  if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

template <class T>
__global__ void reduce_partials_kernel(ReduceOp op, const acc_t<T>* partials, int64_t chunks, T* out, int64_t cols) {
  begin_dependent_kernel();
  using A = acc_t<T>;
  A acc = op == ReduceOp::Max ? A(-INFINITY) : A(0);
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc = combine(op, acc, partials[blockIdx.x * chunks + c]);
  acc = block_reduce(op, acc);
  if (threadIdx.x == 0) out[blockIdx.x] = from_acc<T>(op == ReduceOp::Mean ? acc / A(cols) : acc);
}

template <class T>
__global__ void reduce_middle_kernel(const T* x, T* out, int64_t outer, int64_t mid, int64_t inner) {
  begin_dependent_kernel();
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = j / inner, i = j % inner;
    const T* p = x + o * mid * inner + i;
    A acc = 0;
    for (int64_t m = 0; m < mid; ++m) acc += to_acc(p[m * inner]);
    out[j] = from_acc<T>(acc);
  }
}

/// Reads VEC columns of a row for the column sums, and writes nothing.
template <class T, int VEC>
struct ColumnLoad {
  const T* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&sums)[VEC]) const { load_pack<T, VEC>(x + r * cols + c, sums); }
};

}  // namespace

void reduce_last(ReduceOp op, const Tensor& x, const Tensor& out, int64_t rows, int64_t cols) {
  FT_CHECK(rows <= 2147483647LL, "reduce: too many rows (", rows, ")");
  const int threads = cols >= 256 ? 256 : cols > 32 ? static_cast<int>((cols + 31) / 32 * 32) : 32;
  // One block a row leaves most of the GPU idle when the rows are few and long: split them so
  // that about four blocks run per multiprocessor, each over at least 4096 elements.
  constexpr int64_t kMinChunk = 4096;
  const int64_t wanted_blocks = 4LL * multiprocessor_count();
  int64_t chunks = rows >= wanted_blocks ? 1 : std::min((wanted_blocks + rows - 1) / rows, cols / kMinChunk);
  chunks = std::min<int64_t>(chunks, 65535);
  dispatch_floating(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    if (chunks <= 1 || rows > 65535) {
      launch_dependent(reduce_last_kernel<T>, static_cast<unsigned>(rows), threads, 0, op, x.data<T>(), out.data<T>(),
                       cols);
      return;
    }
    const int64_t chunk = (cols + chunks - 1) / chunks;
    chunks = (cols + chunk - 1) / chunk;
    const DType acc_dtype = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor partials = Tensor::empty({rows * chunks}, acc_dtype, x.device());
    auto* p = static_cast<acc_t<T>*>(partials.data_ptr());
    launch_dependent(reduce_chunks_kernel<T>, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)),
                     kThreads, 0, op, x.data<T>(), p, cols, chunk);
    launch_dependent(reduce_partials_kernel<T>, static_cast<unsigned>(rows), 256, 0, op, p, chunks, out.data<T>(),
                     cols);
  });
  FT_CUDA_CHECK_LAUNCH("reduce_last_kernel");
}

void reduce_middle(const Tensor& x, const Tensor& out, int64_t outer, int64_t mid, int64_t inner) {
  // One thread per output column walks every row alone (768 threads for a GPT-2 bias gradient
  // of 16384 rows, the twin's sum_to); the column kernel spreads the rows over the GPU.
  if (outer == 1 && x.dtype() != DType::F64) {
    column_sums(x, mid, inner, out);
    return;
  }
  dispatch_floating(x.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(reduce_middle_kernel<T>, elementwise_blocks(outer * inner, kThreads), kThreads, 0, x.data<T>(),
                     out.data<T>(), outer, mid, inner);
  });
  FT_CUDA_CHECK_LAUNCH("reduce_middle_kernel");
}

namespace {
// sum_partial_rows (partial_rows.cuh), 4 loads in flight: made for few rows over many columns,
// where the column kernel's tiles leave few blocks (the QKV bias's 128 rows of 2304 partials).
__global__ void __launch_bounds__(kPartialRowWarps * 32)
    partial_row_sums_kernel(const float* partials, int rows, int64_t cols, GradSink<float> out) {
  begin_dependent_kernel();
  const int64_t c = blockIdx.x * 32LL + threadIdx.x % 32;
  const float total = sum_partial_rows<4>(partials, rows, cols, c, c < cols);
  if (threadIdx.x < 32 && c < cols) out.store(c, total);
}
}  // namespace

void partial_row_sums(const Tensor& partials, const GradOutput& out) {
  FT_CHECK(partials.dtype() == DType::F32 && partials.dim() == 2 && out.defined() &&
               out.tensor.numel() == partials.size(1),
           "partial_row_sums: f32 [rows, cols] partials into [cols], got ", shape_str(partials.shape()), " ",
           dtype_name(partials.dtype()));
  const int64_t rows = partials.size(0), cols = partials.size(1);
  launch_dependent(partial_row_sums_kernel, static_cast<unsigned>((cols + 31) / 32), kPartialRowWarps * 32, 0,
                   partials.data<float>(), static_cast<int>(rows), cols, grad_sink<float>(out));
  FT_CUDA_CHECK_LAUNCH("partial_row_sums_kernel");
}

void column_sums(const Tensor& x, int64_t rows, int64_t cols, const GradOutput& out) {
  with_vector_width(x.dtype(), "column sums", cols, {x.data_ptr(), out.tensor.data_ptr()}, [&](auto tag, auto vec) {
    using T = decltype(tag);
    constexpr int V = decltype(vec)::value;
    launch_map_reduce_columns<V, T>(ColumnLoad<T, V>{x.data<T>(), cols}, rows, cols, grad_sink<T>(out));
  });
}

}  // namespace ft::cuda
