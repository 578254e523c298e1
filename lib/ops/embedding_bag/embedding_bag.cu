// Table-batched embedding bag (lib/ops/embedding_bag/embedding_bag.h), with the tables' optimizer update in
// its backward.
//
// Forward: a group of lanes per bag (a warp, or a part of one for short rows) sums its rows in
// f32 registers and writes the pooled row once, in the output dtype. Backward, without any
// [R, D] gradient: the (row, position) pairs are radix-sorted; a warp per chunk of kChunk
// sorted positions sums the upstream rows of each run of equal rows in f32, in sorted order,
// and updates the rows whose run lies inside its chunk (SGD, or row-wise or element-wise
// Adagrad with its accumulators). A run that crosses a chunk boundary leaves one partial sum per chunk; the warp
// of the chunk where it starts adds them in chunk order and updates the row. The order of every
// sum is fixed by the sort, so tables are bit-identical from run to run, and a hot row's
// gradient is summed by many warps. Per-sample weights get their gradient (the pooled gradient
// · the row before the update) in the same pass.
// Twin: bag_rows, gather_rows, mul, segment_sum, cast; updates by row scatter-add and puts.
#include <cub/device/device_radix_sort.cuh>

#include "lib/cuda/bags.cuh"
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/elementwise/elementwise_cuda.h"
#include "lib/ops/embedding_bag/embedding_bag_cuda.h"
#include "lib/ops/sparse_rows/sparse_rows_cuda.h"
#include "lib/runtime/elements.h"

namespace ft::cuda {

namespace {

constexpr int kMaxPacks = 4;  // packs per lane: rows up to 32 · VEC · kMaxPacks columns
constexpr int kChunk = 8;     // sorted positions per warp in the backward: 27K warps at dlrm-kaggle sizes
constexpr int kWarpsPerBlock = kThreads / 32;

template <int VEC, int PACKS>
using LaneRow = float[PACKS][VEC];

__device__ __forceinline__ int64_t pack_column(int p, int lane, int vec) { return (int64_t{p} * 32 + lane) * vec; }

template <class T, int VEC, int PACKS>
__device__ __forceinline__ void load_lane_row(const T* row, int64_t cols, int lane, LaneRow<VEC, PACKS>& v) {
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = pack_column(p, lane, VEC);
    if (c < cols) load_vec<T, VEC>(row + c, v[p]);
    else
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[p][k] = 0.0f;
  }
}

template <class T, int VEC, int PACKS>
__device__ __forceinline__ void store_lane_row(T* row, int64_t cols, int lane, const LaneRow<VEC, PACKS>& v) {
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = pack_column(p, lane, VEC);
    if (c < cols) store_vec<T, VEC>(row + c, v[p]);
  }
}

template <int VEC, int PACKS>
__device__ __forceinline__ float lane_dot(const LaneRow<VEC, PACKS>& a, const LaneRow<VEC, PACKS>& b) {
  float s = 0.0f;
#pragma unroll
  for (int p = 0; p < PACKS; ++p)
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

/// Row `row`'s weights (each lane its packs) and, for Adagrad, its accumulator: loaded when a
/// run starts, so that the loads overlap the run's gradient sum instead of following it.
template <int VEC, int PACKS>
struct RowState {
  LaneRow<VEC, PACKS> w;
  float accumulator;
};

template <int VEC, int PACKS>
__device__ __forceinline__ void load_row_state(const float* weight, int64_t row, int64_t cols, const UpdateArgs& u,
                                               int lane, RowState<VEC, PACKS>& state) {
  load_lane_row<float, VEC, PACKS>(weight + row * cols, cols, lane, state.w);
  state.accumulator = u.kind == RowUpdateKind::RowWiseAdagrad ? u.accumulator[row] : 0.0f;
  // Element-wise accumulators are read pack by pack in update_row, beside the weights they
  // scale: a whole row of them in registers would cost the other updates occupancy.
}

/// Applies one step to weight row `row` (loaded in `state`) from its whole gradient g (the warp
/// holds it, a lane its packs). Every lane of the warp calls it.
template <int VEC, int PACKS>
__device__ __forceinline__ void update_row(float* weight, int64_t row, int64_t cols, const UpdateArgs& u,
                                           RowState<VEC, PACKS>& state, const LaneRow<VEC, PACKS>& g, int lane) {
  float rate = u.lr_scale * *u.lr;
  if (u.kind == RowUpdateKind::RowWiseAdagrad) {
    const float acc = state.accumulator + warp_sum(lane_dot<VEC, PACKS>(g, g)) / static_cast<float>(cols);
    __syncwarp();  // every lane has read the old value before lane 0 writes the new one
    if (lane == 0) u.accumulator[row] = acc;
    rate /= sqrtf(acc) + u.eps;
  }
  if (u.kind == RowUpdateKind::ElementwiseAdagrad) {
    float* acc_row = u.accumulator + row * cols;
#pragma unroll
    for (int q = 0; q < PACKS; ++q) {
      const int64_t c = pack_column(q, lane, VEC);
      if (c >= cols) continue;
      float acc[VEC];
      load_vec<float, VEC>(acc_row + c, acc);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        acc[k] += g[q][k] * g[q][k];
        state.w[q][k] -= rate * g[q][k] / (sqrtf(acc[k]) + u.eps);
      }
      store_vec<float, VEC>(acc_row + c, acc);
    }
  } else {
#pragma unroll
    for (int q = 0; q < PACKS; ++q)
#pragma unroll
      for (int k = 0; k < VEC; ++k) state.w[q][k] -= rate * g[q][k];
  }
  store_lane_row<float, VEC, PACKS>(weight + row * cols, cols, lane, state.w);
}

/// A warp takes 32 bags at a time. First lane j reads bag j's offsets and the table row of its
/// first id: the three dependent loads (offsets → id → row) are paid once per 32 bags instead of
/// once per bag. Then groups of `lanes` threads (a power of two up to 32: D / VEC when that is
/// smaller than a warp) take the bags, kRowsInFlight per group at once: every lane has that many
/// independent row loads outstanding before it adds any of them (rows of several packs already
/// give a lane that many). Further ids of a bag (pooling over more than one) are read after the
/// first, in order. Registers decide the speed: at D = 64, 4 blocks of 256 per SM (64 registers)
/// keep 32 warps with 4 rows of 16 bytes in flight per lane; at 129 registers (before PACKS was
/// a template argument) one block fitted and the kernel ran at a third of this rate.
template <class TO, int VEC, int PACKS>
__global__ void __launch_bounds__(kThreads, 4)
    embedding_bag_forward_kernel(const float* __restrict__ weight, const int64_t* __restrict__ row_offsets,
                                 int64_t tables, const void* ids, bool ids64, const void* offsets, bool offsets64,
                                 const float* __restrict__ per_sample_weights, bool mean, TO* __restrict__ out,
                                 int64_t bags, int64_t n, int64_t cols, int lanes, unsigned* error_word) {
  begin_dependent_kernel();
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kRowsInFlight = PACKS == 1 ? 4 : 1;
  const int lane = threadIdx.x % 32, group = lane / lanes, sublane = lane % lanes, groups = 32 / lanes;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t base = (blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32) * 32; base < bags;
       base += warps * 32) {
    int64_t lane_begin = 0, lane_first_row = 0;
    int lane_count = 0;  // ids in the bag; a bag of 2^31 ids or more is not a bag this kernel meets
    if (base + lane < bags) {
      const BagRange range = bag_range(offsets, offsets64, base + lane, bags, n, error_word);
      lane_begin = range.begin;
      lane_count = static_cast<int>(range.end - range.begin);
      if (lane_count > 0)
        lane_first_row = bag_row(ids, ids64, range.begin, row_offsets, (base + lane) % tables, error_word);
    }
    for (int first = 0; first < 32; first += groups * kRowsInFlight) {
      int count[kRowsInFlight];
      float sum[kRowsInFlight][PACKS][VEC];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int src = first + u * groups + group;  // the bag's lane in the staging above
        const int64_t row = __shfl_sync(kAll, lane_first_row, src & 31);
        count[u] = src < 32 ? __shfl_sync(kAll, lane_count, src & 31) : 0;  // past the warp's 32 bags: none
        float w = 1.0f;
        if (per_sample_weights) {
          const int64_t begin = __shfl_sync(kAll, lane_begin, src & 31);
          if (count[u] > 0) w = per_sample_weights[begin];
        }
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const int64_t c = (int64_t{p} * lanes + sublane) * VEC;
          if (count[u] > 0 && c < cols) {
            load_vec<float, VEC>(weight + row * cols + c, sum[u][p]);
#pragma unroll
            for (int q = 0; q < VEC; ++q) sum[u][p][q] *= w;
          } else {
#pragma unroll
            for (int q = 0; q < VEC; ++q) sum[u][p][q] = 0.0f;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int src = first + u * groups + group;
        const int64_t begin = __shfl_sync(kAll, lane_begin, src & 31), k = base + src;
        if (src >= 32 || k >= bags) continue;
        for (int64_t i = begin + 1; i < begin + count[u]; ++i) {
          const float* row = weight + bag_row(ids, ids64, i, row_offsets, k % tables, error_word) * cols;
          const float w = per_sample_weights ? per_sample_weights[i] : 1.0f;
#pragma unroll
          for (int p = 0; p < PACKS; ++p) {
            const int64_t c = (int64_t{p} * lanes + sublane) * VEC;
            if (c >= cols) break;
            float v[VEC];
            load_vec<float, VEC>(row + c, v);
#pragma unroll
            for (int q = 0; q < VEC; ++q) sum[u][p][q] += w * v[q];
          }
        }
        const float scale = mean && count[u] > 0 ? 1.0f / static_cast<float>(count[u]) : 1.0f;
#pragma unroll
        for (int p = 0; p < PACKS; ++p) {
          const int64_t c = (int64_t{p} * lanes + sublane) * VEC;
          if (c >= cols) break;
#pragma unroll
          for (int q = 0; q < VEC; ++q) sum[u][p][q] *= scale;
          store_vec<TO, VEC>(out + k * cols + c, sum[u][p]);
        }
      }
    }
  }
}

/// A warp per chunk of sorted positions: sums each run's upstream rows, updates the rows whose
/// run lies inside the chunk, and leaves partial sums of the others in partials[chunk][slot]
/// (slot 0: a run continued from the chunk before; slot 1: a run starting here and going on).
template <class TG, int VEC, int PACKS>
__global__ void rows_update_kernel(const TG* grad, const int32_t* keys, const int32_t* perm, const int32_t* bag_of,
                                   const void* offsets, bool offsets64, const float* per_sample_weights, bool mean,
                                   float* weight, int64_t n, int64_t cols, UpdateArgs update, float* partials,
                                   int32_t* starts_crossing, float* per_sample_weights_grad) {
  begin_dependent_kernel();
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
  LaneRow<VEC, PACKS> next;
  load_lane_row<TG, VEC, PACKS>(grad + int64_t{__shfl_sync(kAll, lane_bag, 0)} * cols, cols, lane, next);
  for (int j = 0; j < count;) {
    const int32_t row = __shfl_sync(kAll, lane_row, j);
    const bool run_start = j > 0 || row_before != row;
    LaneRow<VEC, PACKS> sum = {};
    RowState<VEC, PACKS> state;  // the row before the update: also what a per-sample weight's gradient reads
    load_row_state<VEC, PACKS>(weight, row, cols, update, lane, state);
    for (; j < count && __shfl_sync(kAll, lane_row, j) == row; ++j) {
      LaneRow<VEC, PACKS> g;
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
#pragma unroll
        for (int q = 0; q < VEC; ++q) g[p][q] = next[p][q];
      const int32_t next_bag = __shfl_sync(kAll, lane_bag, j + 1 < count ? j + 1 : j);
      if (j + 1 < count) load_lane_row<TG, VEC, PACKS>(grad + int64_t{next_bag} * cols, cols, lane, next);
      const float scale = __shfl_sync(kAll, lane_scale, j);
      const int32_t i = __shfl_sync(kAll, lane_i, j);
      if (per_sample_weights_grad) {
        const float dot = warp_sum(lane_dot<VEC, PACKS>(g, state.w));
        if (lane == 0) per_sample_weights_grad[i] = scale * dot;
      }
      const float factor = scale * __shfl_sync(kAll, lane_weight, j);
#pragma unroll
      for (int p = 0; p < PACKS; ++p)
#pragma unroll
        for (int q = 0; q < VEC; ++q) sum[p][q] += factor * g[p][q];
    }
    const bool run_end = j < count || row_after != row;
    if (run_start && run_end) {
      update_row<VEC, PACKS>(weight, row, cols, update, state, sum, lane);
    } else {
      store_lane_row<float, VEC, PACKS>(partials + (chunk * 2 + (run_start ? 1 : 0)) * cols, cols, lane, sum);
      crossing = crossing || run_start;
    }
  }
  if (lane == 0) starts_crossing[chunk] = crossing;
}

/// A warp per chunk where a run starts and crosses into the next chunks: adds its partial sums
/// in chunk order and updates the row.
template <int VEC, int PACKS>
__global__ void crossing_rows_update_kernel(const int32_t* keys, int64_t n, int64_t chunks, int64_t cols,
                                            const float* partials, const int32_t* starts_crossing, float* weight,
                                            UpdateArgs update) {
  begin_dependent_kernel();
  const int64_t chunk = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (chunk >= chunks || !starts_crossing[chunk]) return;
  const int lane = threadIdx.x % 32;
  const int64_t chunk_end = n < (chunk + 1) * kChunk ? n : (chunk + 1) * kChunk;
  const int32_t row = keys[chunk_end - 1];
  LaneRow<VEC, PACKS> sum;
  load_lane_row<float, VEC, PACKS>(partials + (chunk * 2 + 1) * cols, cols, lane, sum);
  for (int64_t next = chunk + 1; next < chunks && keys[next * kChunk] == row; ++next) {
    LaneRow<VEC, PACKS> part;
    load_lane_row<float, VEC, PACKS>(partials + next * 2 * cols, cols, lane, part);
#pragma unroll
    for (int p = 0; p < PACKS; ++p)
#pragma unroll
      for (int q = 0; q < VEC; ++q) sum[p][q] += part[p][q];
  }
  RowState<VEC, PACKS> state;
  load_row_state<VEC, PACKS>(weight, row, cols, update, lane, state);
  update_row<VEC, PACKS>(weight, row, cols, update, state, sum, lane);
}

int key_bits(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < rows) ++bits;
  return bits;
}

/// Calls f with the pack width the rows allow (4 floats when D and the pointers allow it, else 1)
/// and the packs a lane holds: one when a warp's 32 · VEC columns cover the row, kMaxPacks
/// otherwise. The kernels keep PACKS rows of VEC floats in registers per lane, so D = 64 must not
/// pay for kMaxPacks: at 129 registers the forward ran one block per SM, 1.6x slower.
template <class F>
void with_row_packing(int64_t cols, std::initializer_list<const void*> pointers, F&& f) {
  auto with_packs = [&](auto vec) {
    constexpr int V = decltype(vec)::value;
    if (cols <= 32 * V) return f(vec, std::integral_constant<int, 1>{});
    f(vec, std::integral_constant<int, kMaxPacks>{});
  };
  if (packable<float>(cols, pointers)) return with_packs(std::integral_constant<int, 4>{});
  FT_CHECK(cols <= 32 * kMaxPacks, "embedding_bag: rows of ", cols, " columns need 16-byte aligned tensors");
  with_packs(std::integral_constant<int, 1>{});
}

}  // namespace

bool embedding_bag_supported(int64_t d) { return d >= 1 && (d <= 32 * kMaxPacks || (d % 4 == 0 && d <= 32 * 4 * kMaxPacks)); }

void embedding_bag_forward(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                           const Tensor& per_sample_weights, BagMode mode, const Tensor& out) {
  const int64_t bags = offsets.numel() - 1, cols = weight.size(1);
  if (bags == 0) return;
  with_row_packing(cols, {weight.data_ptr(), out.data_ptr()}, [&](auto vec, auto packs) {
    constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
    dispatch_half_float(out.dtype(), "embedding_bag", [&](auto tag) {
      using TO = decltype(tag);
      int lanes = 1;
      while (lanes < 32 && lanes * V < cols) lanes *= 2;
      const int64_t bags_per_block = 32 * kWarpsPerBlock;  // a warp stages 32 bags at a time
      const unsigned blocks =
          static_cast<unsigned>(std::min<int64_t>((bags + bags_per_block - 1) / bags_per_block, int64_t{1} << 20));
      launch_dependent(embedding_bag_forward_kernel<TO, V, P>, blocks, kThreads, 0, weight.data<float>(),
                       row_offsets.data<int64_t>(), row_offsets.numel() - 1, ids.data_ptr(), ids.dtype() == DType::I64,
                       offsets.data_ptr(), offsets.dtype() == DType::I64,
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
  // Two allocations per call: the i32 lists (rows, bags, positions, sorted keys and positions,
  // and a flag per chunk), and the f32 partial sums followed by CUB's sort scratch.
  size_t temp_bytes = 0;
  const int bits = key_bits(weight.size(0));
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, bits,
                                                stream()));
  Tensor scratch = Tensor::empty({5 * n + chunks}, DType::I32, grad.device());
  Tensor rows = scratch.narrow(0, 0, n), bags = scratch.narrow(0, n, n), positions = scratch.narrow(0, 2 * n, n);
  int32_t* keys = scratch.data<int32_t>() + 3 * n;
  int32_t* perm = scratch.data<int32_t>() + 4 * n;
  int32_t* starts_crossing = scratch.data<int32_t>() + 5 * n;
  const int64_t partial_floats = chunks * 2 * cols;
  Tensor floats = Tensor::empty({partial_floats + static_cast<int64_t>((temp_bytes + 3) / 4)}, DType::F32, grad.device());
  float* partials = floats.data<float>();
  cuda::bag_rows(ids, offsets, row_offsets, rows, bags);
  runtime::arange_elements(positions.data_ptr(), positions.dtype(), positions.device(), n);
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(partials + partial_floats, temp_bytes, rows.data<int32_t>(), keys,
                                                positions.data<int32_t>(), perm, static_cast<int>(n), 0, bits,
                                                stream()));
  const UpdateArgs args{update.kind, update.lr.data<float>(), static_cast<float>(update.lr_scale),
                        update.kind != RowUpdateKind::SGD ? update.accumulator.data<float>() : nullptr,
                        static_cast<float>(update.eps)};
  const unsigned blocks = static_cast<unsigned>((chunks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_row_packing(cols, {grad.data_ptr(), weight.data_ptr()}, [&](auto vec, auto packs) {
    constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
    dispatch_half_float(grad.dtype(), "embedding_bag backward", [&](auto tag) {
      using TG = decltype(tag);
      launch_dependent(rows_update_kernel<TG, V, P>, blocks, kThreads, 0, grad.data<TG>(), keys, perm,
                       bags.data<int32_t>(), offsets.data_ptr(), offsets.dtype() == DType::I64,
                       per_sample_weights.defined() ? per_sample_weights.data<float>() : nullptr, mode == BagMode::Mean,
                       weight.data<float>(), n, cols, args, partials, starts_crossing,
                       per_sample_weights_grad.defined() ? per_sample_weights_grad.data<float>() : nullptr);
    });
    FT_CUDA_CHECK_LAUNCH("rows_update_kernel");
    launch_dependent(crossing_rows_update_kernel<V, P>, blocks, kThreads, 0, keys, n, chunks, cols, partials,
                     starts_crossing, weight.data<float>(), args);
    FT_CUDA_CHECK_LAUNCH("crossing_rows_update_kernel");
  });
}

}  // namespace ft::cuda
