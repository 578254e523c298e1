// Table-batched embedding bag (lib/ops/embedding_bag.h), with the tables' optimizer update in
// its backward.
//
// Forward: a group of lanes per bag (a warp, or a part of one for short rows) sums its rows in
// f32 registers and writes the pooled row once, in the output dtype. Backward, without any
// [R, D] gradient: the (row, position) pairs are radix-sorted; a warp per chunk of kChunk
// sorted positions sums the upstream rows of each run of equal rows in f32, in sorted order,
// and updates the rows whose run lies inside its chunk (SGD, or row-wise Adagrad with its
// accumulator). A run that crosses a chunk boundary leaves one partial sum per chunk; the warp
// of the chunk where it starts adds them in chunk order and updates the row. The order of every
// sum is fixed by the sort, so tables are bit-identical from run to run, and a hot row's
// gradient is summed by many warps. Per-sample weights get their gradient (the pooled gradient
// · the row before the update) in the same pass.
// Twin: bag_rows, gather_rows, mul, segment_sum, cast; updates by row scatter-add and puts.
#include <cub/device/device_radix_sort.cuh>

#include "lib/cuda/bags.cuh"
#include "lib/cuda/launchers.h"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/embedding_bag.h"
#include "lib/ops/sparse_rows.h"

namespace ft::cuda {

namespace {

constexpr int kMaxPacks = 4;  // packs per lane: rows up to 32 · VEC · kMaxPacks columns
constexpr int kChunk = 8;     // sorted positions per warp in the backward: 27K warps at dlrm-kaggle sizes
constexpr int kWarpsPerBlock = kThreads / 32;

template <int VEC>
using LaneRow = float[kMaxPacks][VEC];

__device__ __forceinline__ int64_t pack_column(int p, int lane, int vec) { return (int64_t{p} * 32 + lane) * vec; }

template <class T, int VEC>
__device__ __forceinline__ void load_lane_row(const T* row, int64_t cols, int lane, LaneRow<VEC>& v) {
#pragma unroll
  for (int p = 0; p < kMaxPacks; ++p) {
    const int64_t c = pack_column(p, lane, VEC);
    if (c < cols) load_vec<T, VEC>(row + c, v[p]);
    else
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[p][k] = 0.0f;
  }
}

template <class T, int VEC>
__device__ __forceinline__ void store_lane_row(T* row, int64_t cols, int lane, const LaneRow<VEC>& v) {
#pragma unroll
  for (int p = 0; p < kMaxPacks; ++p) {
    const int64_t c = pack_column(p, lane, VEC);
    if (c < cols) store_vec<T, VEC>(row + c, v[p]);
  }
}

template <int VEC>
__device__ __forceinline__ float lane_dot(const LaneRow<VEC>& a, const LaneRow<VEC>& b) {
  float s = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxPacks; ++p)
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += a[p][k] * b[p][k];
  return s;
}

struct UpdateArgs {
  RowUpdateKind kind;
  const float* lr;
  float lr_scale;
  float* accumulator;
  float eps;
};

/// Applies one step to weight row `row` from its whole gradient g (the warp holds it, a lane its
/// packs). Every lane of the warp calls it.
template <int VEC>
__device__ __forceinline__ void update_row(float* weight, int64_t row, int64_t cols, const UpdateArgs& u,
                                           const LaneRow<VEC>& g, int lane) {
  float rate = u.lr_scale * *u.lr;
  if (u.kind == RowUpdateKind::RowWiseAdagrad) {
    const float acc = u.accumulator[row] + warp_sum(lane_dot<VEC>(g, g)) / static_cast<float>(cols);
    __syncwarp();
    if (lane == 0) u.accumulator[row] = acc;
    rate /= sqrtf(acc) + u.eps;
  }
  LaneRow<VEC> w;
  float* p = weight + row * cols;
  load_lane_row<float, VEC>(p, cols, lane, w);
#pragma unroll
  for (int q = 0; q < kMaxPacks; ++q)
#pragma unroll
    for (int k = 0; k < VEC; ++k) w[q][k] -= rate * g[q][k];
  store_lane_row<float, VEC>(p, cols, lane, w);
}

/// A group of `lanes` threads per bag (a power of two up to 32: D / VEC when that is smaller
/// than a warp), so that one warp keeps several bags' rows in flight when rows are short.
template <class TO, int VEC>
__global__ void embedding_bag_forward_kernel(const float* weight, const int64_t* row_offsets, int64_t tables,
                                             const void* ids, bool ids64, const void* offsets, bool offsets64,
                                             const float* per_sample_weights, bool mean, TO* out, int64_t bags,
                                             int64_t n, int64_t cols, int lanes, unsigned* error_word) {
  const int sublane = threadIdx.x % lanes;
  const int64_t groups_per_block = blockDim.x / lanes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t k = blockIdx.x * groups_per_block + threadIdx.x / lanes; k < bags; k += stride) {
    const BagRange range = bag_range(offsets, offsets64, k, bags, n, error_word);
    float sum[kMaxPacks][VEC] = {};
    for (int64_t i = range.begin; i < range.end; ++i) {
      const float* row = weight + bag_row(ids, ids64, i, row_offsets, k % tables, error_word) * cols;
      const float w = per_sample_weights ? per_sample_weights[i] : 1.0f;
#pragma unroll
      for (int p = 0; p < kMaxPacks; ++p) {
        const int64_t c = (int64_t{p} * lanes + sublane) * VEC;
        if (c >= cols) break;
        float v[VEC];
        load_vec<float, VEC>(row + c, v);
#pragma unroll
        for (int q = 0; q < VEC; ++q) sum[p][q] += w * v[q];
      }
    }
    const float scale = mean && range.end > range.begin ? 1.0f / static_cast<float>(range.end - range.begin) : 1.0f;
#pragma unroll
    for (int p = 0; p < kMaxPacks; ++p) {
      const int64_t c = (int64_t{p} * lanes + sublane) * VEC;
      if (c >= cols) break;
#pragma unroll
      for (int q = 0; q < VEC; ++q) sum[p][q] *= scale;
      store_vec<TO, VEC>(out + k * cols + c, sum[p]);
    }
  }
}

/// A warp per chunk of sorted positions: sums each run's upstream rows, updates the rows whose
/// run lies inside the chunk, and leaves partial sums of the others in partials[chunk][slot]
/// (slot 0: a run continued from the chunk before; slot 1: a run starting here and going on).
template <class TG, int VEC>
__global__ void rows_update_kernel(const TG* grad, const int32_t* keys, const int32_t* perm, const int32_t* bag_of,
                                   const void* offsets, bool offsets64, const float* per_sample_weights, bool mean,
                                   float* weight, int64_t n, int64_t cols, UpdateArgs update, float* partials,
                                   int32_t* starts_crossing, float* per_sample_weights_grad) {
  const int64_t chunk = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int64_t chunk_begin = chunk * kChunk;
  if (chunk_begin >= n) return;
  const int lane = threadIdx.x % 32;
  const int64_t chunk_end = n < chunk_begin + kChunk ? n : chunk_begin + kChunk;
  const int count = static_cast<int>(chunk_end - chunk_begin);
  // The chunk's rows, bags and scales, a position per lane, loaded at once: the loop below then
  // waits only for upstream rows, and fetches the next one while it adds the current one.
  int32_t lane_row = -1, lane_i = 0, lane_bag = 0;
  float lane_scale = 1.0f, lane_weight = 1.0f;
  if (lane < count) {
    lane_row = keys[chunk_begin + lane];
    lane_i = perm[chunk_begin + lane];
    lane_bag = bag_of[lane_i];
    if (mean)
      lane_scale /= static_cast<float>(load_id(offsets, offsets64, lane_bag + 1) - load_id(offsets, offsets64, lane_bag));
    if (per_sample_weights) lane_weight = per_sample_weights[lane_i];
  }
  const int32_t row_before = chunk_begin > 0 ? keys[chunk_begin - 1] : -1;
  const int32_t row_after = chunk_end < n ? keys[chunk_end] : -1;
  constexpr unsigned kAll = 0xffffffffu;
  int32_t crossing = 0;
  LaneRow<VEC> next;
  load_lane_row<TG, VEC>(grad + int64_t{__shfl_sync(kAll, lane_bag, 0)} * cols, cols, lane, next);
  for (int j = 0; j < count;) {
    const int32_t row = __shfl_sync(kAll, lane_row, j);
    const bool run_start = j > 0 || row_before != row;
    LaneRow<VEC> sum = {}, before;
    if (per_sample_weights_grad) load_lane_row<float, VEC>(weight + int64_t{row} * cols, cols, lane, before);
    for (; j < count && __shfl_sync(kAll, lane_row, j) == row; ++j) {
      LaneRow<VEC> g;
#pragma unroll
      for (int p = 0; p < kMaxPacks; ++p)
#pragma unroll
        for (int q = 0; q < VEC; ++q) g[p][q] = next[p][q];
      const int32_t next_bag = __shfl_sync(kAll, lane_bag, j + 1 < count ? j + 1 : j);
      if (j + 1 < count) load_lane_row<TG, VEC>(grad + int64_t{next_bag} * cols, cols, lane, next);
      const float scale = __shfl_sync(kAll, lane_scale, j);
      const int32_t i = __shfl_sync(kAll, lane_i, j);
      if (per_sample_weights_grad) {
        const float dot = warp_sum(lane_dot<VEC>(g, before));
        if (lane == 0) per_sample_weights_grad[i] = scale * dot;
      }
      const float factor = scale * __shfl_sync(kAll, lane_weight, j);
#pragma unroll
      for (int p = 0; p < kMaxPacks; ++p)
#pragma unroll
        for (int q = 0; q < VEC; ++q) sum[p][q] += factor * g[p][q];
    }
    const bool run_end = j < count || row_after != row;
    if (run_start && run_end) {
      update_row<VEC>(weight, row, cols, update, sum, lane);
    } else {
      store_lane_row<float, VEC>(partials + (chunk * 2 + (run_start ? 1 : 0)) * cols, cols, lane, sum);
      crossing = crossing || run_start;
    }
  }
  if (lane == 0) starts_crossing[chunk] = crossing;
}

/// A warp per chunk where a run starts and crosses into the next chunks: adds its partial sums
/// in chunk order and updates the row.
template <int VEC>
__global__ void crossing_rows_update_kernel(const int32_t* keys, int64_t n, int64_t chunks, int64_t cols,
                                            const float* partials, const int32_t* starts_crossing, float* weight,
                                            UpdateArgs update) {
  const int64_t chunk = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (chunk >= chunks || !starts_crossing[chunk]) return;
  const int lane = threadIdx.x % 32;
  const int64_t chunk_end = n < (chunk + 1) * kChunk ? n : (chunk + 1) * kChunk;
  const int32_t row = keys[chunk_end - 1];
  LaneRow<VEC> sum;
  load_lane_row<float, VEC>(partials + (chunk * 2 + 1) * cols, cols, lane, sum);
  for (int64_t next = chunk + 1; next < chunks && keys[next * kChunk] == row; ++next) {
    LaneRow<VEC> part;
    load_lane_row<float, VEC>(partials + next * 2 * cols, cols, lane, part);
#pragma unroll
    for (int p = 0; p < kMaxPacks; ++p)
#pragma unroll
      for (int q = 0; q < VEC; ++q) sum[p][q] += part[p][q];
  }
  update_row<VEC>(weight, row, cols, update, sum, lane);
}

int key_bits(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < rows) ++bits;
  return bits;
}

/// Calls f with the pack width the rows allow: 4 floats when D and the pointers allow it, else 1.
template <class F>
void with_pack_width(int64_t cols, std::initializer_list<const void*> pointers, F&& f) {
  if (packable<float>(cols, pointers)) return f(std::integral_constant<int, 4>{});
  FT_CHECK(cols <= 32 * kMaxPacks, "embedding_bag: rows of ", cols, " columns need 16-byte aligned tensors");
  f(std::integral_constant<int, 1>{});
}

}  // namespace

bool embedding_bag_supported(int64_t d) { return d >= 1 && (d <= 32 * kMaxPacks || (d % 4 == 0 && d <= 32 * 4 * kMaxPacks)); }

void embedding_bag_forward(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                           const Tensor& per_sample_weights, BagMode mode, const Tensor& out) {
  const int64_t bags = offsets.numel() - 1, cols = weight.size(1);
  if (bags == 0) return;
  with_pack_width(cols, {weight.data_ptr(), out.data_ptr()}, [&](auto vec) {
    constexpr int V = decltype(vec)::value;
    dispatch_half_float(out.dtype(), "embedding_bag", [&](auto tag) {
      using TO = decltype(tag);
      int lanes = 1;
      while (lanes < 32 && lanes * V < cols) lanes *= 2;
      const int64_t groups = kThreads / lanes;
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((bags + groups - 1) / groups, int64_t{1} << 20));
      embedding_bag_forward_kernel<TO, V><<<blocks, kThreads, 0, stream()>>>(
          weight.data<float>(), row_offsets.data<int64_t>(), row_offsets.numel() - 1, ids.data_ptr(),
          ids.dtype() == DType::I64, offsets.data_ptr(), offsets.dtype() == DType::I64,
          per_sample_weights.defined() ? per_sample_weights.data<float>() : nullptr, mode == BagMode::Mean,
          out.data<TO>(), bags, ids.numel(), cols, lanes, device_error_word());
    });
  });
  FT_CUDA_CHECK_LAUNCH("embedding_bag_forward_kernel");
}

void embedding_bag_backward_update(const Tensor& grad, const Tensor& weight, const Tensor& row_offsets,
                                   const Tensor& ids, const Tensor& offsets, const Tensor& per_sample_weights,
                                   BagMode mode, const SparseRowUpdate& update, const Tensor& per_sample_weights_grad) {
  const int64_t n = ids.numel(), cols = weight.size(1), chunks = (n + kChunk - 1) / kChunk;
  // Rows and bags of every id (the twin's primitive), then the rows sorted with their positions.
  Tensor scratch = Tensor::empty({5 * n}, DType::I32, grad.device());
  Tensor rows = scratch.narrow(0, 0, n), bags = scratch.narrow(0, n, n), positions = scratch.narrow(0, 2 * n, n);
  int32_t* keys = scratch.data<int32_t>() + 3 * n;
  int32_t* perm = scratch.data<int32_t>() + 4 * n;
  cuda::bag_rows(ids, offsets, row_offsets, rows, bags);
  cuda::arange(positions);
  size_t temp_bytes = 0;
  const int bits = key_bits(weight.size(0));
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, rows.data<int32_t>(), keys,
                                                positions.data<int32_t>(), perm, static_cast<int>(n), 0, bits,
                                                stream()));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes)}, DType::U8, grad.device());
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, rows.data<int32_t>(), keys,
                                                positions.data<int32_t>(), perm, static_cast<int>(n), 0, bits,
                                                stream()));
  Tensor partials = Tensor::empty({chunks * 2 * cols}, DType::F32, grad.device());
  Tensor starts_crossing = Tensor::empty({chunks}, DType::I32, grad.device());
  const UpdateArgs args{update.kind, update.lr.data<float>(), static_cast<float>(update.lr_scale),
                        update.kind == RowUpdateKind::RowWiseAdagrad ? update.accumulator.data<float>() : nullptr,
                        static_cast<float>(update.eps)};
  const unsigned blocks = static_cast<unsigned>((chunks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_pack_width(cols, {grad.data_ptr(), weight.data_ptr()}, [&](auto vec) {
    constexpr int V = decltype(vec)::value;
    dispatch_half_float(grad.dtype(), "embedding_bag backward", [&](auto tag) {
      using TG = decltype(tag);
      rows_update_kernel<TG, V><<<blocks, kThreads, 0, stream()>>>(
          grad.data<TG>(), keys, perm, bags.data<int32_t>(), offsets.data_ptr(), offsets.dtype() == DType::I64,
          per_sample_weights.defined() ? per_sample_weights.data<float>() : nullptr, mode == BagMode::Mean,
          weight.data<float>(), n, cols, args, partials.data<float>(), starts_crossing.data<int32_t>(),
          per_sample_weights_grad.defined() ? per_sample_weights_grad.data<float>() : nullptr);
    });
    FT_CUDA_CHECK_LAUNCH("rows_update_kernel");
    crossing_rows_update_kernel<V><<<blocks, kThreads, 0, stream()>>>(keys, n, chunks, cols, partials.data<float>(),
                                                                      starts_crossing.data<int32_t>(),
                                                                      weight.data<float>(), args);
    FT_CUDA_CHECK_LAUNCH("crossing_rows_update_kernel");
  });
}

}  // namespace ft::cuda
