// Fused softmax cross-entropy. A block per row (a warp per row for small vocabularies, a thread
// per row for tiny ones): one pass keeps a running max and sum of exponentials (and the row sum
// for label smoothing); when a gradient is needed a second pass over the same row writes
// dlogits = (softmax − target distribution) · scale, so forward + backward read the logits from
// HBM once and write dlogits once. The second pass reads the row from shared memory, where the
// first pass parked it, when it fits (bf16 rows up to about 56K columns, at 2 blocks per SM);
// otherwise it re-reads global memory and hopes for L2. Each block sums its row losses and the
// last block adds the blocks' sums in block order (deterministic). Replaces the twin's max, sub,
// exp, sum, log, one-hot compare, mul and reduction kernels and their backward chain.
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/cross_entropy/cross_entropy_cuda.h"

namespace ft::cuda {

namespace {

// 512 threads a row. 1024 was slower: with a row per block and no shared-memory copy, the rows
// in flight overflow L2 and the second pass goes back to HBM.
constexpr int kRowThreads = 512;
// Packs each thread loads before it uses any: four 16-byte loads in flight per thread.
constexpr int kLoadsInFlight = 4;

// The kernel is bound by instructions issued, not bytes, once the row stays in shared memory
// (ncu on the H100: 65% issue-active at 39 instructions per logit with a compare-and-branch per
// element). So the inner loops work on whole packs: one max per pack, one rescale of the running
// sum when the max moves, and exp2 of a fused multiply-add per element.

struct MaxSum {  // a running log-sum-exp: sum of exp(x − max)
  float max, sum;
};
struct CombineMaxSum {
  __device__ MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
  }
};

template <class T, int V>
__device__ __forceinline__ void unpack(const Pack<T, V>& pack, float (&v)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = to_acc(pack.v[k]);
}

/// The threads that take one row: the whole block (kThreads of them); for small vocabularies one
/// warp of a block of kWarpRowsPerBlock rows; for tiny ones (a classifier's 10 classes) one
/// thread of a block of kThreadRowsPerBlock rows. Its reductions return the result to every
/// thread of the group.
constexpr int kWarpRowsPerBlock = 8;
constexpr int kThreadRowsPerBlock = 256;
template <int kThreads>
struct RowGroup {
  static constexpr bool kThread = kThreads == 1;
  static constexpr bool kWarp = kThreads == 32;
  static constexpr int kRowsPerBlock = kThread ? kThreadRowsPerBlock : kWarp ? kWarpRowsPerBlock : 1;
  static constexpr int kBlockThreads = kThreads * kRowsPerBlock;
  using MaxSumReduce = std::conditional_t<kWarp, cub::WarpReduce<MaxSum>, cub::BlockReduce<MaxSum, kThreads>>;
  using SumReduce = std::conditional_t<kWarp, cub::WarpReduce<float>, cub::BlockReduce<float, kThreads>>;
  struct GroupStorage {
    typename MaxSumReduce::TempStorage max_sum[kRowsPerBlock];
    typename SumReduce::TempStorage sum[kRowsPerBlock];
    float broadcast[kRowsPerBlock];
  };
  struct NoStorage {};  // a thread's row needs no exchange
  using Storage = std::conditional_t<kThread, NoStorage, GroupStorage>;
  Storage& storage;
  __device__ int index() const { return kThread ? threadIdx.x : kWarp ? threadIdx.x / 32 : 0; }
  __device__ int rank() const { return kThread ? 0 : kWarp ? threadIdx.x % 32 : threadIdx.x; }
  __device__ int64_t row() const { return blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + index(); }
  /// Makes rank 0's value every thread's.
  __device__ float broadcast(float v) const {
    if constexpr (kThread) {
      return v;
    } else if constexpr (kWarp) {
      return __shfl_sync(0xffffffffu, v, 0);
    } else {
      if (threadIdx.x == 0) storage.broadcast[0] = v;
      __syncthreads();
      const float all = storage.broadcast[0];
      __syncthreads();  // read by everyone before the next broadcast overwrites it
      return all;
    }
  }
  __device__ MaxSum max_sum(const MaxSum& v) const {
    if constexpr (kThread) {
      return v;
    } else {
      const MaxSum total = MaxSumReduce(storage.max_sum[index()]).Reduce(v, CombineMaxSum{});
      return {broadcast(total.max), broadcast(total.sum)};
    }
  }
  __device__ float sum(float v) const {
    if constexpr (kThread) return v;
    else return broadcast(SumReduce(storage.sum[index()]).Sum(v));
  }
};

/// Calls f(c, pack) for this thread's V-wide packs of the row (the group's rank-th of every
/// `threads` packs), U packs loaded before any is used.
template <class T, int V, int U, class F>
__device__ __forceinline__ void for_packs(const T* row, int vocab, int rank, int threads, F&& f) {
  using P = Pack<T, V>;
  const int stride = threads * V;
  int c = rank * V;
  for (; c + (U - 1) * stride < vocab; c += U * stride) {
    P packs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) packs[u] = *reinterpret_cast<const P*>(row + c + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) f(c + u * stride, packs[u]);
  }
  for (; c < vocab; c += stride) f(c, *reinterpret_cast<const P*>(row + c));
}

// Small vocabularies get a warp per row, 8 rows a block; tiny ones (a classifier's 10 classes)
// a thread per row, 256 rows a block: a block per row leaves most threads idle, and thousands
// of blocks queue at the one counter that finds the last block.
constexpr int kSmallRowThreads = 32;
constexpr int kSmallVocab = 1024;
constexpr int kTinyVocab = 32;
// A thread-per-row launch has at most this many rows / 256 blocks, each of which counts every
// target itself (a few loads a thread from L2) instead of waiting on a count kernel.
constexpr int64_t kFoldedCountRows = 16384;

/// The number of targets that are counted (not ignore_index and in range), summed over a block
/// of kThreads and returned to all of them. Out-of-range ids are flagged in `error_word` when it
/// is given.
template <int kThreads>
__device__ float count_targets(const void* targets, bool targets64, int64_t n, int64_t vocab, int64_t ignore_index,
                               unsigned* error_word) {
  using SumReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename SumReduce::TempStorage storage;
  __shared__ float total;
  float part = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t t = load_id(targets, targets64, i);
    if (t != ignore_index) {
      if (t >= 0 && t < vocab) part += 1.0f;
      else if (error_word) atomicOr(error_word, kTargetOutOfRange);
    }
  }
  const float sum = SumReduce(storage).Sum(part);
  if (threadIdx.x == 0) total = sum;
  __syncthreads();
  return total;
}

/// Sums `n` floats written by other blocks (read past L1), a few loads in flight a thread, and
/// returns the block's total to thread 0. The order is fixed by n and the block size.
template <int kThreads>
__device__ float sum_block_partials(const float* partials, int n) {
  constexpr int kInFlight = 4;
  float parts[kInFlight] = {};
  int i = threadIdx.x;
  for (; i + (kInFlight - 1) * kThreads < n; i += kInFlight * kThreads) {
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) parts[k] += __ldcg(&partials[i + k * kThreads]);
  }
  for (; i < n; i += kThreads) parts[0] += __ldcg(&partials[i]);
  using SumReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename SumReduce::TempStorage storage;
  return SumReduce(storage).Sum((parts[0] + parts[1]) + (parts[2] + parts[3]));
}

/// `count` is the batch's number of counted rows, or null: then each block counts the targets
/// itself (thread-per-row launches of at most kFoldedCountRows rows).
template <class T, int V, int kThreadsPerRow>
__global__ void __launch_bounds__(RowGroup<kThreadsPerRow>::kBlockThreads) cross_entropy_forward_kernel(
    const T* logits, const void* targets, bool targets64, int vocab, int64_t ignore_index, float smoothing,
    bool mean_reduction, const float* count, unsigned* error_word, float* block_loss, unsigned* counter, float* loss,
    bool accumulate, T* dlogits, int64_t rows, bool cache_row) {
  begin_dependent_kernel();
  using P = Pack<T, V>;
  using Group = RowGroup<kThreadsPerRow>;
  constexpr int kBlockThreads = Group::kBlockThreads;
  __shared__ typename Group::Storage group_storage;
  const Group group{group_storage};
  const float counted_rows =
      count ? *count
            : count_targets<kBlockThreads>(targets, targets64, rows, vocab, ignore_index,
                                           blockIdx.x == 0 ? error_word : nullptr);
  const int64_t r = group.row();
  float my_loss = 0.0f;  // rank 0's row loss, scaled for the mean
  // A multi-row block's last rows may lie past the end; their groups skip to the sums.
  if (Group::kRowsPerBlock == 1 || r < rows) {
    const T* row = logits + r * vocab;
    const int64_t target = load_id(targets, targets64, r);
    const bool counted = target != ignore_index && target >= 0 && target < vocab;
    extern __shared__ __align__(16) unsigned char row_cache_bytes[];  // [vocab] T when cache_row
    T* row_cache = reinterpret_cast<T*>(row_cache_bytes);
    const bool cache = cache_row && dlogits;  // block rows only (the launch asks for none otherwise)
    // The target's logit is read before the group's reductions: once past them, other threads
    // overwrite the row with dlogits in place (linear_cross_entropy passes logits as dlogits).
    const float picked = counted && group.rank() == 0 ? to_acc(row[target]) : 0.0f;

    MaxSum acc{-INFINITY, 0.0f};
    float row_sum = 0.0f;
    for_packs<T, V, kLoadsInFlight>(row, vocab, group.rank(), kThreadsPerRow, [&](int c, const P& pack) {
      // Each thread parks its own packs and later reads back only those: no barrier needed.
      if (cache) *reinterpret_cast<P*>(row_cache + c) = pack;
      float v[V];
      unpack(pack, v);
      float pack_max = v[0];
#pragma unroll
      for (int k = 1; k < V; ++k) pack_max = fmaxf(pack_max, v[k]);
      if (pack_max > acc.max) {
        acc.sum *= exp2_approx((acc.max - pack_max) * kLog2e);
        acc.max = pack_max;
      }
      if (acc.max != -INFINITY) {  // else every logit so far is −inf and adds nothing
        const float shift = acc.max * kLog2e;
#pragma unroll
        for (int k = 0; k < V; ++k) acc.sum += exp2_approx(fmaf(v[k], kLog2e, -shift));
      }
      if (smoothing > 0.0f) {
#pragma unroll
        for (int k = 0; k < V; ++k) row_sum += v[k];
      }
    });
    const MaxSum total = group.max_sum(acc);
    const float sum_all = smoothing > 0.0f ? group.sum(row_sum) : 0.0f;
    const float lse = total.max + __logf(total.sum);
    // With every row ignored the mean is 0/0: an ignored row's 0 times 1/0 keeps that NaN.
    const float mean_scale = mean_reduction ? 1.0f / counted_rows : 1.0f;
    const float scale = counted ? mean_scale : 0.0f;  // of this row's gradient
    if (group.rank() == 0) {
      float l = 0.0f;
      if (counted) {
        l = lse - (1.0f - smoothing) * picked - smoothing * sum_all / static_cast<float>(vocab);
      }
      my_loss = l * mean_scale;
    }
    if (dlogits) {
      // d = (softmax − (1 − smoothing)·onehot − smoothing / V) · scale
      const float shift = lse * kLog2e;
      const float uniform_scaled = smoothing / static_cast<float>(vocab) * scale;
      const float target_scaled = (1.0f - smoothing) * scale;
      const int target_col = counted ? static_cast<int>(target) : -1;
      T* out = dlogits + r * vocab;
      for_packs<T, V, 1>(cache ? row_cache : row, vocab, group.rank(), kThreadsPerRow, [&](int c, const P& pack) {
        float v[V], d[V];
        unpack(pack, v);
#pragma unroll
        for (int k = 0; k < V; ++k) d[k] = fmaf(exp2_approx(fmaf(v[k], kLog2e, -shift)), scale, -uniform_scaled);
        const unsigned rel = static_cast<unsigned>(target_col - c);
        if (rel < static_cast<unsigned>(V)) {
#pragma unroll
          for (int k = 0; k < V; ++k)
            if (k == static_cast<int>(rel)) d[k] -= target_scaled;
        }
        P result;
#pragma unroll
        for (int k = 0; k < V; ++k) result.v[k] = from_acc<T>(d[k]);
        *reinterpret_cast<P*>(out + c) = result;
      });
    }
  }
  // Each block adds its rows' losses; the last block to finish adds the blocks' sums in block
  // order (deterministic), not every row's loss, which would serialize on that one block.
  if constexpr (Group::kRowsPerBlock == 1) {
    if (threadIdx.x == 0) block_loss[blockIdx.x] = my_loss;
  } else {
    using RowsReduce = cub::BlockReduce<float, kBlockThreads>;
    __shared__ typename RowsReduce::TempStorage rows_storage;
    const float sum = RowsReduce(rows_storage).Sum(my_loss);
    if (threadIdx.x == 0) block_loss[blockIdx.x] = sum;
  }
  __threadfence();
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float sum = sum_block_partials<kBlockThreads>(block_loss, static_cast<int>(gridDim.x));
  if (threadIdx.x == 0) {
    *loss = accumulate ? *loss + sum : sum;
    *counter = 0;
  }
}

__global__ void cross_entropy_count_kernel(const void* targets, bool targets64, int64_t n, int64_t vocab,
                                           int64_t ignore_index, float* count, unsigned* error_word) {
  begin_dependent_kernel();
  const float total = count_targets<1024>(targets, targets64, n, vocab, ignore_index, error_word);
  if (threadIdx.x == 0) *count = total;
}

template <class T>
__global__ void scale_by_upstream_kernel(T* grad, int64_t n, const float* upstream) {
  begin_dependent_kernel();
  const float g = *upstream;
  if (g == 1.0f) return;  // the usual case: loss.backward() seeds 1
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    grad[i] = from_acc<T>(to_acc(grad[i]) * g);
}

}  // namespace

void cross_entropy_count(const Tensor& targets, int64_t vocab, int64_t ignore_index, const Tensor& count) {
  launch_dependent(cross_entropy_count_kernel, 1, 1024, 0, targets.data_ptr(), targets.dtype() == DType::I64,
                   targets.numel(), vocab, ignore_index, count.data<float>(), device_error_word());
  FT_CUDA_CHECK_LAUNCH("cross_entropy_count_kernel");
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options,
                           const Tensor& count, const Tensor& loss, bool accumulate, const Tensor& dlogits) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  FT_CHECK(rows <= 2147483647LL, "cross_entropy: too many rows (", rows, ")");
  FT_CHECK(vocab <= 2147483647LL - 4096, "cross_entropy: vocabulary too large (", vocab, ")");
  // Tiny vocabularies take a thread a row, element by element (one instantiation a dtype).
  const bool thread_rows = vocab <= kTinyVocab;
  const bool fold_count = !count.defined() && thread_rows && rows <= kFoldedCountRows;
  Tensor batch_count = count;
  if (!count.defined() && !fold_count) {
    batch_count = Tensor::empty({1}, DType::F32, logits.device());
    cross_entropy_count(targets, vocab, options.ignore_index, batch_count);
  }
  dispatch_half_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto vec, auto threads) {
      constexpr int V = decltype(vec)::value, kThreadsPerRow = decltype(threads)::value;
      using Group = RowGroup<kThreadsPerRow>;
      auto kernel = cross_entropy_forward_kernel<T, V, kThreadsPerRow>;
      // Park a block row in shared memory when two blocks of it fit on a multiprocessor (warp
      // and thread rows are short enough to come back from L1).
      const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(T);
      const bool cache_row = Group::kRowsPerBlock == 1 && dlogits.defined() &&
                             row_bytes + 4096 <= shared_memory_per_multiprocessor() / 2;
      const size_t smem = cache_row ? row_bytes : 0;
      if (smem > 48 * 1024)
        FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      const auto blocks = static_cast<unsigned>((rows + Group::kRowsPerBlock - 1) / Group::kRowsPerBlock);
      // A loss a block, and the counter that finds the last block.
      const ColumnScratch scratch = column_scratch(1, blocks, 1);
      launch_dependent(kernel, blocks, Group::kBlockThreads, smem, logits.data<T>(), targets.data_ptr(),
                       targets.dtype() == DType::I64, static_cast<int>(vocab), options.ignore_index,
                       static_cast<float>(options.label_smoothing), options.reduction == Reduction::Mean,
                       fold_count ? nullptr : batch_count.data<float>(), device_error_word(), scratch.partials,
                       scratch.counters, loss.data<float>(), accumulate,
                       dlogits.defined() ? dlogits.data<T>() : nullptr, rows, cache_row);
    };
    const void* d = dlogits.defined() ? dlogits.data_ptr() : nullptr;
    auto with_threads = [&](auto vec) {
      if (vocab <= kSmallVocab) launch(vec, std::integral_constant<int, kSmallRowThreads>{});
      else launch(vec, std::integral_constant<int, kRowThreads>{});
    };
    if (thread_rows) launch(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{});
    else if (packable<T>(vocab, {logits.data_ptr(), d})) with_threads(std::integral_constant<int, kPackSize<T>>{});
    else with_threads(std::integral_constant<int, 1>{});
  });
  FT_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

void scale_by_upstream(const Tensor& grad, const Tensor& upstream) {
  FT_CHECK(upstream.dtype() == DType::F32 && upstream.numel() == 1, "scale_by_upstream: upstream must be one f32");
  const int64_t n = grad.numel();
  if (n == 0) return;
  dispatch_half_float(grad.dtype(), "cross_entropy backward", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(scale_by_upstream_kernel<T>, elementwise_blocks(n, kThreads), kThreads, 0, grad.data<T>(), n,
                     upstream.data<float>());
  });
  FT_CUDA_CHECK_LAUNCH("scale_by_upstream_kernel");
}

}  // namespace ft::cuda
