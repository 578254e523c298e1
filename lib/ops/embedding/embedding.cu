// Token + position embedding (lib/ops/embedding/embedding.h).
//
// Forward: each output row is one token row plus one position row, read as packs and written
// once. Backward of the token table without atomics: the ids are radix-sorted with their
// positions (stable, so equal ids keep position order), and the first occurrence of each id
// adds the gradient rows of its run in f32, in that order, into its row of the table's
// gradient. The result does not depend on timing, and a frequent token (a space, a newline)
// is summed in f32 instead of by thousands of bf16 atomic adds.
#include <cub/device/device_radix_sort.cuh>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/grad_sink.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/embedding/embedding_cuda.h"
#include "lib/ops/reduce/reduce_cuda.h"
#include "lib/runtime.h"

namespace ft::cuda {

namespace {

template <class T, int VEC>
__global__ void token_position_forward_kernel(const void* ids, bool ids64, const T* tokens, const T* positions,
                                              T* out, int64_t n, int64_t steps, int64_t vocab, int64_t cols,
                                              unsigned* error_word) {
  begin_dependent_kernel();
  const int64_t groups = cols / VEC, total = n * groups;
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < total; g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = g / groups, c = (g % groups) * VEC;
    const int64_t id = load_id(ids, ids64, i);
    float sum[VEC] = {};
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicOr(error_word, kIndexOutOfRange);
    } else {
      load_vec<T, VEC>(tokens + id * cols + c, sum);
      if (positions) {  // uniform over the grid: token_embedding passes none
        float position[VEC];
        load_vec<T, VEC>(positions + (i % steps) * cols + c, position);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum[k] += position[k];
      }
    }
    store_vec<T, VEC>(out + i * cols + c, sum);
  }
}

/// Sort keys: the ids as 32-bit keys (vocabularies fit), and each one's position.
__global__ void sort_input_kernel(const void* ids, bool ids64, int64_t n, int32_t* keys, int32_t* order) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    keys[i] = static_cast<int32_t>(load_id(ids, ids64, i));
    order[i] = static_cast<int32_t>(i);
  }
}

constexpr int kRunChunkPacks = 4;  // packs per lane per pass over a run: bounds the registers

/// One warp per sorted position; the first of each run of equal ids sums the run's gradient
/// rows in position order into that id's row.
template <class T, int VEC>
__global__ void token_runs_kernel(const T* grad, const int32_t* keys, const int32_t* order, int64_t n, int64_t cols,
                                  int64_t vocab, GradSink<T> table_grad) {
  begin_dependent_kernel();
  const int64_t start = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (start >= n || (start > 0 && keys[start] == keys[start - 1])) return;
  const int lane = threadIdx.x % 32;
  const int32_t id = keys[start];
  if (id < 0 || id >= vocab) return;  // the forward flagged it; nothing is written out of bounds
  int64_t end = start + 1;
  while (end < n && keys[end] == id) ++end;
  constexpr int64_t kChunk = 32 * VEC * kRunChunkPacks;
  for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
    float acc[kRunChunkPacks][VEC] = {};
    for (int64_t r = start; r < end; ++r) {
      const T* row = grad + static_cast<int64_t>(order[r]) * cols;
#pragma unroll
      for (int p = 0; p < kRunChunkPacks; ++p) {
        const int64_t c = c0 + (p * 32 + lane) * VEC;
        if (c >= cols) break;
        float g[VEC];
        load_vec<T, VEC>(row + c, g);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[p][k] += g[k];
      }
    }
#pragma unroll
    for (int p = 0; p < kRunChunkPacks; ++p) {
      const int64_t c = c0 + (p * 32 + lane) * VEC;
      if (c >= cols) continue;
      const int64_t at = static_cast<int64_t>(id) * cols + c;
      if (table_grad.f32) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) table_grad.store(at + k, acc[p][k]);
      } else {
        store_vec<T, VEC>(table_grad.out + at, acc[p]);
      }
    }
  }
}

int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

// A fresh gradient gets zeros where nothing reaches; a GradBuffer view already holds them (or
// the earlier contributions it keeps), so only the reached rows are touched.
void zero_fresh(const GradOutput& g) {
  if (!g.view) runtime::zero_bytes(g.tensor.data_ptr(), g.tensor.device(), g.tensor.nbytes());
}

template <class F>
void with_embedding_config(DType dtype, int64_t cols, std::initializer_list<const void*> pointers, F&& f) {
  dispatch_half_float(dtype, "token_position_embedding", [&](auto tag) {
    using T = decltype(tag);
    if (packable<T>(cols, pointers)) f(tag, std::integral_constant<int, kPackSize<T>>{});
    else f(tag, std::integral_constant<int, 1>{});
  });
}

}  // namespace

void token_position_forward(const Tensor& ids, const Tensor& tokens, const Tensor& positions, const Tensor& out) {
  const bool with_positions = positions.defined();
  const int64_t n = ids.numel(), steps = with_positions ? ids.size(1) : 1, vocab = tokens.size(0), cols = tokens.size(1);
  const void* position_rows = with_positions ? positions.data_ptr() : nullptr;
  with_embedding_config(tokens.dtype(), cols, {tokens.data_ptr(), position_rows, out.data_ptr()},
                        [&](auto tag, auto vec) {
                          using T = decltype(tag);
                          constexpr int V = decltype(vec)::value;
                          launch_dependent(token_position_forward_kernel<T, V>,
                                           elementwise_blocks(n * (cols / V), kThreads), kThreads, 0, ids.data_ptr(),
                                           ids.dtype() == DType::I64, tokens.data<T>(), static_cast<const T*>(position_rows),
                                           out.data<T>(), n, steps, vocab, cols, device_error_word());
                          FT_CUDA_CHECK_LAUNCH("token_position_forward_kernel");
                        });
}

void token_position_backward(const Tensor& grad, const Tensor& ids, const GradOutput& tokens_grad,
                             const GradOutput& positions_grad) {
  const int64_t batch = ids.size(0), steps = ids.size(1), cols = tokens_grad.tensor.size(1);
  // Positions: the sum over the batch for the first T rows.
  zero_fresh(positions_grad);
  column_sums(grad, batch, steps * cols, GradOutput(positions_grad.tensor.narrow(0, 0, steps), positions_grad.accumulate));
  token_rows_backward(grad, ids, tokens_grad);
}

void token_rows_backward(const Tensor& grad, const Tensor& ids, const GradOutput& tokens_grad) {
  const int64_t n = ids.numel();
  const int64_t vocab = tokens_grad.tensor.size(0), cols = tokens_grad.tensor.size(1);
  FT_CHECK(n < (int64_t{1} << 31), "token embedding: ", n, " ids exceed the 32-bit sort");
  // Sort (id, position) pairs, then one f32 sum per run of equal ids.
  zero_fresh(tokens_grad);
  Tensor sort = Tensor::empty({4 * n}, DType::I32, grad.device());
  int32_t* keys_in = sort.data<int32_t>();
  int32_t *order_in = keys_in + n, *keys = keys_in + 2 * n, *order = keys_in + 3 * n;
  launch_dependent(sort_input_kernel, elementwise_blocks(n, kThreads), kThreads, 0, ids.data_ptr(),
                   ids.dtype() == DType::I64, n, keys_in, order_in);
  FT_CUDA_CHECK_LAUNCH("sort_input_kernel");
  size_t temp_bytes = 0;
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys, order_in, order,
                                                static_cast<int>(n), 0, key_bits(vocab), stream()));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, DType::U8, grad.device());
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys_in, keys, order_in, order,
                                                static_cast<int>(n), 0, key_bits(vocab), stream()));
  with_embedding_config(grad.dtype(), cols, {grad.data_ptr(), tokens_grad.tensor.data_ptr()}, [&](auto tag, auto vec) {
    using T = decltype(tag);
    constexpr int V = decltype(vec)::value;
    constexpr int kWarps = kThreads / 32;
    launch_dependent(token_runs_kernel<T, V>, static_cast<unsigned>((n + kWarps - 1) / kWarps), kThreads, 0,
                     grad.data<T>(), keys, order, n, cols, vocab, grad_sink<T>(tokens_grad));
    FT_CUDA_CHECK_LAUNCH("token_runs_kernel");
  });
}

}  // namespace ft::cuda
