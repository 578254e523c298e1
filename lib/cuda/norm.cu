// Fused LayerNorm / RMSNorm, with the optional residual add in front.
//
// A "row group" normalizes one row at a time: a warp when the row fits in 32 threads' registers
// (C <= 32·4 packs, the GPT-2 case: shuffles only, no barriers), else the whole block. Each
// thread holds its packs of the row in registers, so x (and the residual) are read from HBM
// once; the residual sum is stored once, the output written once, and only rstd (f32) is saved
// besides the output, from which backward takes x̂ (the epilogue form keeps its input and mean
// instead). Backward holds that tensor and dy the same way and writes dx once; the weight and bias
// gradients of each column are accumulated by the one thread that owns the column, in shared
// memory (no atomics, fixed order), and the per-block partials are added by a small column
// kernel in block order. Replaces the twin's cast, mean, sub, mul, rsqrt and add kernels and
// their backward chains.
#include <algorithm>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/grad_sink.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/partial_rows.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/layer_norm.h"

namespace ft::cuda {

namespace {

constexpr int kWarpPacks = 4;    // packs per lane in warp mode
constexpr int kBlockPacks = 8;   // packs per thread in block mode
constexpr int kBlockThreads = 256;  // warp mode: 8 rows per block
// Warp-mode backward blocks per multiprocessor. On the H100 (GPT-2 shape, residual+LN fwd+bwd)
// 2 blocks took 0.084 ms and 4 took 0.112: bounded to 64 registers, the backward spilled.
constexpr int kNormBackwardBlocks = 2;
// Warp-mode forward blocks per multiprocessor the registers must allow: 4 (64 registers) hold
// the MLP's 4096 rows of 1024 (512 blocks, a row a warp) in one wave; with the LayerNorm + GELU +
// Dropout epilogue the compiler took 72 registers, 3 blocks fitted, and a third of the blocks
// ran as a second wave (17 us a launch on the H100).
constexpr int kNormForwardBlocks = 4;

// Most threads a launch can have: 8 warps in warp mode; in block mode cols / (V·kBlockPacks)
// rounded up, at most 8192 / 8 = 1024 for unpacked rows and 256 for packed ones. Declared to
// the compiler so that it never gives a kernel more registers than such a block can hold
// (unpacked rows of more than about 5800 columns failed to launch before).
template <int V, bool kWarpRows>
constexpr int kMaxThreads = kWarpRows ? kBlockThreads : V == 1 ? 1024 : 256;

/// Whether the backward stages its rows through shared memory (cp.async, one row ahead): row
/// groups of one warp with 16-byte packs (bf16 rows of up to 1024 columns, GPT-2's shape), in
/// the plain norms only: the epilogue form's registers leave no room for it (its one user, the
/// MLP at C = 1024, could not fit the stages besides the slices anyway), and the staging code
/// in that kernel cost it registers it needs.
template <class T, int V, bool kWarpRows, bool kEpilogue>
constexpr bool kStagedRows = kWarpRows && sizeof(T) * V == 16 && !kEpilogue;

/// Columns of a backward slice: cols rounded up to whole steps (a step: the row group's threads
/// times their pack width), so that every (pack, element, thread) position has a word.
__host__ __device__ inline int padded_cols(int cols, int step) { return (cols + step - 1) / step * step; }

/// Words per thread in a row of a slice: 4 (one 16-byte access) when packs hold a multiple of 4.
template <int V>
constexpr int kSliceWidth = V % 4 == 0 ? 4 : 1;

/// Where column c lives in a slice: thread t = (c mod step) / V holds it as element k of its
/// pack p = c / step. The slice stores rows (p, k / W) of group_size consecutive threads, W words
/// each (W = kSliceWidth): a warp's access is 32 consecutive words, or with W = 4 one 16-byte
/// word per lane, 512 consecutive bytes; both free of bank conflicts.
template <int V>
__device__ __forceinline__ int slice_word(int p, int k, int t, int group_size) {
  constexpr int W = kSliceWidth<V>;
  return ((p * (V / W) + k / W) * group_size + t) * W + k % W;
}
template <int V>
__device__ __forceinline__ int slice_index(int c, int group_size, int step) {
  const int p = c / step, within = c - p * step, t = within / V, k = within - t * V;
  return slice_word<V>(p, k, t, group_size);
}

constexpr int kDxSumSlice = 2;  // the third slice: dx's column sums

/// Whether the backward keeps dx's column sums in registers (a float per column a thread owns)
/// instead of adding each pack into a third shared-memory slice: the plain warp-row kernels
/// (GPT-2's, 96 registers without the sums, 127 with; 128 fit their 2 blocks of 8 warps). Their
/// third slice did not fit beside the staged rows: 8 staged warps an SM became 6 (2 blocks of 3
/// slices and stages), and the backward took 48.0 us where it took 41.6 without the sums (ncu,
/// the gpt2-124M step on the H100). The epilogue kernels (128 registers already) and the block-
/// row ones (a row a block: P = 8 packs a thread, 208 registers with them) keep the slice.
template <bool kWarpRows, bool kEpilogue>
constexpr bool kDxSumsInRegisters = kWarpRows && !kEpilogue;

/// Shared-memory slices a row group adds into: dweight, dbias, and dx's column sums unless the
/// warps keep those in registers and write them into their staged rows' memory at the end. The
/// kernel lays them out and the launch sizes them by this one rule.
__host__ __device__ constexpr int group_slice_rows(bool sum_dx, bool dx_sums_in_stages) {
  return sum_dx && !dx_sums_in_stages ? 3 : 2;
}
/// Words of a block's partial row: dweight, dbias (and dx's column sums), each cols wide.
__host__ __device__ constexpr int partial_sums(bool sum_dx) { return sum_dx ? 3 : 2; }

/// The plain norms' backward keeps each column's weight, bias and 1/weight as f32 in shared
/// memory, one slice each (slice_index's layout), written once a block. Read from memory as
/// packed bf16, each pass took a 16-byte load and 8 unpacks a pack for each of w and b, and
/// 1/w a reciprocal an element (six instructions with __fdividef's range check): a quarter of the
/// GPT-2 backward's 1,070 instructions a row.
constexpr int kWeightSlice = 0, kBiasSlice = 1, kInverseWeightSlice = 2, kColumnParamSlices = 3;

/// This thread's words of its row group's slices (slice_index's layout): dweight, dbias, and with
/// Epilogue::sum_dx a third for dx's column sums, `padded` words apart.
template <int V>
struct SliceWords {
  static constexpr int W = kSliceWidth<V>;
  /// W consecutive words of a row, one shared-memory access.
  using Words = std::conditional_t<W == 4, float4, float>;
  float* own;  // the slice's first row, offset to this thread's words
  int group_size, padded;
  __device__ float* at(int p, int k) const { return own + slice_word<V>(p, k, 0, group_size); }
  /// Slice `slice`'s words for elements q·W .. q·W + W − 1 of pack p (slice 0: dweight, 1: dbias,
  /// 2: dx's column sums; or a column parameter's).
  __device__ Words* words(int p, int q, int slice) const {
    return reinterpret_cast<Words*>(at(p, q * W) + slice * padded);
  }
  /// Elements q·W .. q·W + W − 1 of v as Words, and back.
  static __device__ Words pack(const float (&v)[V], int q) {
    if constexpr (W == 4) return make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    else return v[q];
  }
  static __device__ void unpack(const Words& w, float (&v)[V], int q) {
    if constexpr (W == 4) v[4 * q] = w.x, v[4 * q + 1] = w.y, v[4 * q + 2] = w.z, v[4 * q + 3] = w.w;
    else v[q] = w;
  }
  static __device__ Words plus(const Words& a, const Words& b) {
    if constexpr (W == 4) return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    else return a + b;
  }
  /// Slice `slice`'s words of pack p += v.
  __device__ void add_one(int p, int slice, const float (&v)[V]) const {
#pragma unroll
    for (int q = 0; q < V / W; ++q) *words(p, q, slice) = plus(*words(p, q, slice), pack(v, q));
  }
  /// Slice `slice`'s words of pack p = v.
  __device__ void write(int p, int slice, const float (&v)[V]) const {
#pragma unroll
    for (int q = 0; q < V / W; ++q) *words(p, q, slice) = pack(v, q);
  }
  /// v = slice `slice`'s words of pack p (the column parameters' layout is a slice's).
  __device__ void read(int p, int slice, float (&v)[V]) const {
#pragma unroll
    for (int q = 0; q < V / W; ++q) unpack(*words(p, q, slice), v, q);
  }
  /// dweight[k] += gv[k] and dbias[k] += g[k] over pack p's V words: all loads issued before
  /// the adds (one add per element waiting on its own load left the warp's shared-memory
  /// latency in series, 16 times a pack).
  __device__ void add(int p, const float (&gv)[V], const float (&g)[V]) const {
#pragma unroll
    for (int q = 0; q < V / W; ++q) {
      const Words dweight = *words(p, q, 0), dbias = *words(p, q, 1);
      *words(p, q, 0) = plus(dweight, pack(gv, q));
      *words(p, q, 1) = plus(dbias, pack(g, q));
    }
  }
};

/// A thread's dropout keep bits for one row: bit q·V + k for element k of its pack q. Held as
/// one word (32 bits cover the warp-mode packs) and tested with a constant shift, where an array
/// of bools took three instructions an element to unpack from the mask's bytes.
template <int V, int P>
using KeepBits = std::conditional_t<P * V <= 32, uint32_t, uint64_t>;

/// Keep bits drawn from Philox for the packs at columns first + q·step of the row starting at
/// element row_start.
template <int V, int P>
__device__ __forceinline__ KeepBits<V, P> drawn_keep_bits(uint64_t seed, uint64_t offset, int64_t row_start, int first,
                                                          int step, int64_t cols, float p) {
  KeepBits<V, P> bits = 0;
#pragma unroll
  for (int q = 0; q < P; ++q) {
    const int64_t c = first + q * step;
    if (c >= cols) break;
    bool keep[V];
    dropout_keep<V>(seed, offset, static_cast<uint64_t>(row_start + c), p, keep);
#pragma unroll
    for (int k = 0; k < V; ++k) bits |= static_cast<KeepBits<V, P>>(keep[k]) << (q * V + k);
  }
  return bits;
}

/// The same bits drawn again in the backward where the forward saved no mask (f32 rows,
/// unpacked rows). Not inlined: the Philox rounds' registers counted against the whole
/// backward, which then spilled its rows (bf16, C = 1024: 208 bytes of spill loads) though it
/// reads the saved bits there.
template <int V, int P>
__device__ __noinline__ KeepBits<V, P> redrawn_keep_bits(uint64_t seed, uint64_t offset, int64_t row_start, int first,
                                                         int step, int64_t cols, float p) {
  return drawn_keep_bits<V, P>(seed, offset, row_start, first, step, cols, p);
}

/// The keep bits from the mask the forward saved (byte j holds elements 8j..8j+7, bit k for
/// 8j + k; the forward writes it for packs of a multiple of 8 elements).
template <int V, int P>
__device__ __forceinline__ KeepBits<V, P> saved_keep_bits(const uint8_t* mask, int64_t row_start, int first, int step,
                                                          int64_t cols) {
  KeepBits<V, P> bits = 0;
#pragma unroll
  for (int q = 0; q < P; ++q) {
    const int64_t c = first + q * step;
    if (c >= cols) break;
    const uint64_t i = static_cast<uint64_t>(row_start + c);
    if constexpr (V % 8 == 0) {  // whole bytes: packs start at multiples of V
#pragma unroll
      for (int k = 0; k < V; k += 8) bits |= static_cast<KeepBits<V, P>>(mask[(i + k) >> 3]) << (q * V + k);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        bits |= static_cast<KeepBits<V, P>>((mask[(i + k) >> 3] >> ((i + k) & 7)) & 1u) << (q * V + k);
    }
  }
  return bits;
}

/// Whether element k of pack q is kept.
template <int V, int P>
__device__ __forceinline__ bool kept(KeepBits<V, P> bits, int q, int k) {
  return (bits >> (q * V + k)) & 1u;
}

template <bool kWarpRows>
struct RowGroup {
  __device__ int rank() const { return kWarpRows ? threadIdx.x % 32 : threadIdx.x; }
  __device__ int size() const { return kWarpRows ? 32 : blockDim.x; }
  __device__ int64_t first_row() const {
    return kWarpRows ? blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  }
  __device__ int64_t row_stride() const { return kWarpRows ? gridDim.x * (int64_t)(blockDim.x / 32) : gridDim.x; }
  __device__ float sum(float v, float* scratch) const { return kWarpRows ? warp_sum(v) : block_sum(v, scratch); }
};


/// The epilogue as the kernels see it (NormEpilogue with the offset as a device pointer).
struct Epilogue {
  Activation act = Activation::None;
  float p = 0.0f, scale = 1.0f;
  uint64_t seed = 0;
  const int64_t* offset = nullptr;
  uint8_t* mask = nullptr;  // keep bits: the forward writes them (V % 8 == 0), the backward reads
  // The backward also sums dx's columns, as stored (rounded to T), into a third slice: the bias
  // gradient of the linear layer whose output this norm normalizes, read from registers instead
  // of from dx again (cuBLASLt's BGRADB kernel: 6.9 us a layer for the MLP's 4096 × 1024, 16.5
  // us for each of GPT-2's projections). Both forms; the plain one takes it in GPT-2.
  bool sum_dx = false;
};

// kEpilogue is a compile-time switch: with the epilogue's code in the plain kernels, their
// registers grew (forward 64 -> 74, backward 118 -> 128) and residual + LayerNorm slowed from
// 0.084 to 0.090 ms on the H100.
template <class T, int V, int P, bool kRms, bool kWarpRows, bool kEpilogue>
__global__ void __launch_bounds__(kMaxThreads<V, kWarpRows>, kWarpRows ? kNormForwardBlocks : 1) norm_forward_kernel(const T* x, const T* residual, const T* weight, const T* bias, T* sum, T* out,
                                    float* mean_out, float* rstd_out, int64_t rows, int64_t cols, float eps,
                                    Epilogue epi) {
  begin_dependent_kernel();
  __shared__ float scratch[33];
  const RowGroup<kWarpRows> group;
  const uint64_t offset = kEpilogue && epi.p > 0.0f ? static_cast<uint64_t>(*epi.offset) : 0;
  const int64_t step = static_cast<int64_t>(group.size()) * V;
  for (int64_t r = group.first_row(); r < rows; r += group.row_stride()) {
    float s[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
      load_vec<T, V>(x + r * cols + c, s[p]);
      if (residual) {
        float res[V];
        load_vec<T, V>(residual + r * cols + c, res);
#pragma unroll
        for (int k = 0; k < V; ++k) s[p][k] = rounded<T>(s[p][k] + res[k]);  // as the twin stores the sum
        store_vec<T, V>(sum + r * cols + c, s[p]);
      }
    }
    // The keep bits depend only on the elements' indices: drawn here, the Philox rounds run
    // while the row's loads are in flight.
    KeepBits<V, P> keep = 0;
    if (kEpilogue && epi.p > 0.0f)
      keep = drawn_keep_bits<V, P>(epi.seed, offset, r * cols, group.rank() * V, static_cast<int>(step), cols, epi.p);
    float part = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (group.rank() * V + p * step >= cols) break;
#pragma unroll
      for (int k = 0; k < V; ++k) part += s[p][k];
    }
    const float mean = kRms ? 0.0f : group.sum(part, scratch) / static_cast<float>(cols);
    part = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
#pragma unroll
      for (int k = 0; k < V; ++k) part += (s[p][k] - mean) * (s[p][k] - mean);
    }
    const float rstd = rsqrtf(group.sum(part, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
      float w[V], b[V] = {};
      load_vec<T, V>(weight + c, w);
      if (bias) load_vec<T, V>(bias + c, b);
#pragma unroll
      for (int k = 0; k < V; ++k) s[p][k] = (s[p][k] - mean) * rstd * w[k] + b[k];
      if constexpr (kEpilogue) {
        if constexpr (V % 8 == 0) {
          if (epi.p > 0.0f && epi.mask) {
#pragma unroll
            for (int q = 0; q < V; q += 8)
              epi.mask[(r * cols + c + q) >> 3] = static_cast<uint8_t>(keep >> (p * V + q));
          }
        }
        with_activation(epi.act, [&](auto act) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            s[p][k] = activate(act, s[p][k], kFastMath<T>);
            if (epi.p > 0.0f) s[p][k] = kept<V, P>(keep, p, k) ? s[p][k] * epi.scale : 0.0f;
          }
        });
      }
      store_vec<T, V>(out + r * cols + c, s[p]);
    }
    if (group.rank() == 0) {
      if (mean_out) mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

// dx = rstd·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)); RMS drops the first mean.
// Shared memory: one [2, padded cols] slice (dweight, dbias; [3, ..] with dx's column sums) per
// row group of the block, then in the plain norms the block's [3, padded cols] column parameters
// (w, b, 1/w), then the staged rows; the slices are laid out
// column-group-major and thread-minor (slice_index): each warp access then touches 32
// consecutive words. Indexed by column, a lane's 8 consecutive columns put lanes 0, 4, 8, ...
// on one bank, an 8-way conflict on all four accesses per element, which bound the kernel at
// 31% of the H100's bandwidth (62 us for the GPT-2 shape where the bytes need 25).
// `saved` and dy stay in registers as loaded (packed bf16 is half the registers of f32), and x̂
// and dy·w are computed again for dx instead of being kept.
// What the forward saved decides where x̂ comes from. Plain norms (no epilogue) saved their
// output y = x̂·w + b, which the next op keeps anyway, so that their input can die: x̂ is
// (y − b)/w. Then dy·w·x̂ = dy·(y − b), and dweight's Σ dy·x̂ is Σ dy·(y − b) divided by w once
// per column (sum_partials_kernel), so only dx needs 1/w, per element: the block computes it
// once a column, with w and b, into shared memory (kColumnParamSlices; held in registers, the
// packed bf16 kernel spilled). With an epilogue the output is not y, so the input x was saved and
// x̂ = (x − mean)·rstd.
template <class T, int V, int P, bool kRms, bool kWarpRows, bool kEpilogue>
__global__ void __launch_bounds__(kMaxThreads<V, kWarpRows>, kWarpRows ? kNormBackwardBlocks : 1)
    norm_backward_kernel(const T* dy, const T* saved, const T* weight, const float* mean_in, const float* rstd_in,
                         T* dx, float* partials, int64_t rows, int64_t cols, const T* bias, Epilogue epi,
                         const T* addend, unsigned* error_word, bool stage_rows) {
  begin_dependent_kernel();
  constexpr bool kFromOutput = !kEpilogue;
  using Raw = Pack<T, V>;
  const bool staged = kStagedRows<T, V, kWarpRows, kEpilogue> && stage_rows;
  __shared__ float scratch[33];
  extern __shared__ float slices[];
  const RowGroup<kWarpRows> group;
  const int groups = kWarpRows ? blockDim.x / 32 : 1;
  // Column indices in 32 bits (cols <= 8192, norm_supported) to spare registers.
  const int step = group.size() * V, ncols = static_cast<int>(cols), padded = padded_cols(ncols, step);
  const bool sum_dx = epi.sum_dx;
  // dx's column sums: in registers in the plain warp-row kernels (kDxSumsInRegisters), which
  // write them at the end into their stages' memory when staged (else into a third slice); in
  // a third slice, added to per pack, elsewhere.
  const bool dx_sums_in_stages = kDxSumsInRegisters<kWarpRows, kEpilogue> && staged;
  const int slice_rows = group_slice_rows(sum_dx, dx_sums_in_stages);
  const SliceWords<V> acc{
      slices + (kWarpRows ? threadIdx.x / 32 : 0) * slice_rows * padded + group.rank() * kSliceWidth<V>, group.size(),
      padded};
  // Staged rows: the warp's two stages of (saved, dy) rows, after the block's slices and column
  // parameters. A lane copies exactly the packs it reads back, so its own wait makes them
  // visible: no barrier.
  float* column_params = slices + groups * slice_rows * padded;
  const SliceWords<V> params{column_params + group.rank() * kSliceWidth<V>, group.size(), padded};
  T* const stages_base = reinterpret_cast<T*>(column_params + (kFromOutput ? kColumnParamSlices * padded : 0));
  T* stages = stages_base + (threadIdx.x / 32) * 4 * padded;
  auto stage_row = [&](int64_t r, int stage) {
    if (r < rows) {
      T* to = stages + stage * 2 * padded;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int c = group.rank() * V + p * step;
        if (c >= ncols) break;
        mma::copy_async16(to + c, saved + r * cols + c, 16);
        mma::copy_async16(to + padded + c, dy + r * cols + c, 16);
      }
    }
    mma::commit_copies();  // an empty group past the last row keeps the wait count uniform
  };
  int stage = 0;
  float dx_sums[kDxSumsInRegisters<kWarpRows, kEpilogue> ? P : 1][V] = {};
  if (staged) stage_row(group.first_row(), 0);
  for (int p = 0; p < padded / step; ++p)
#pragma unroll
    for (int k = 0; k < V; ++k)
      for (int slice = 0; slice < slice_rows; ++slice) acc.at(p, k)[slice * padded] = 0.0f;
  if constexpr (kFromOutput) {
    // A pack a thread, both loads issued first: a column a thread left three loads' latency in
    // series at the start of every block (7% of the GPT-2 backward's stall samples). Packs never
    // straddle ncols (cols is a multiple of V), so the padding words are never read.
    for (int c = threadIdx.x * V; c < ncols; c += blockDim.x * V) {
      float w[V], b[V] = {};
      load_vec<T, V>(weight + c, w);
      if constexpr (!kRms) load_vec<T, V>(bias + c, b);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int at = slice_index<V>(c + k, group.size(), step);
        column_params[kWeightSlice * padded + at] = w[k];
        column_params[kBiasSlice * padded + at] = b[k];
        column_params[kInverseWeightSlice * padded + at] = 1.0f / w[k];
      }
    }
    __syncthreads();
  }
  for (int64_t r = group.first_row(); r < rows; r += group.row_stride(), stage ^= 1) {
    const float mean = kRms || kFromOutput ? 0.0f : mean_in[r], rstd = rstd_in[r];
    const float shift = -mean * rstd;  // x̂ = x·rstd + shift
    Raw xs[P], gs[P];
    auto read_row = [&](const T* saved_row, const T* dy_row) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int c = group.rank() * V + p * step;
        if (c >= ncols) break;
        xs[p] = *reinterpret_cast<const Raw*>(saved_row + c);
        gs[p] = *reinterpret_cast<const Raw*>(dy_row + c);
      }
    };
    if (staged) {
      // The next row's copies go out before this row is read: a row stays in flight while
      // the warp computes (with rows loaded into registers, 16 warps an SM each waiting on its
      // own row kept too few bytes in flight: 39.5 us for 75 MB on the H100).
      stage_row(r + group.row_stride(), stage ^ 1);
      mma::wait_copies<1>();
      __syncwarp();  // orders the reads below after the wait for the compiler
      // Read through the shared array itself: through a pointer that may also point to global
      // memory the compiler issued generic loads, which wait on the long scoreboard (9% of the
      // GPT-2 backward's stall samples, at the first use of each row).
      read_row(stages + stage * 2 * padded, stages + stage * 2 * padded + padded);
    } else {
      read_row(saved + r * cols, dy + r * cols);
    }
    KeepBits<V, P> keep = 0;
    if (kEpilogue && epi.p > 0.0f)
      keep = epi.mask ? saved_keep_bits<V, P>(epi.mask, r * cols, group.rank() * V, step, cols)
                      : redrawn_keep_bits<V, P>(epi.seed, static_cast<uint64_t>(*epi.offset), r * cols,
                                                group.rank() * V, step, cols, epi.p);
    float part_g = 0.0f, part_gx = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = group.rank() * V + p * step;
      if (c >= ncols) break;
      float w[V], b[V] = {};
      if constexpr (kFromOutput) {
        params.read(p, kWeightSlice, w);
        if constexpr (!kRms) params.read(p, kBiasSlice, b);
      } else {
        load_vec<T, V>(weight + c, w);
        if (bias) load_vec<T, V>(bias + c, b);
      }
      // v: x̂·w from the output (dweight is divided by w later), x̂ from the input.
      float g[V], v[V], gv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        g[k] = element(gs[p], k);
        v[k] = kFromOutput ? element(xs[p], k) - b[k] : fmaf(element(xs[p], k), rstd, shift);
      }
      if constexpr (kEpilogue) {
        // dy is the gradient of dropout(act(y)), y = x̂·w + b: undo both first (rounded to T, as
        // the twin's chain stores that gradient), then the norm's backward runs on it.
        with_activation(epi.act, [&](auto act) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            if (epi.p > 0.0f) g[k] = kept<V, P>(keep, p, k) ? g[k] * epi.scale : 0.0f;
            if (act != Activation::None) g[k] *= activate_grad(act, v[k] * w[k] + b[k], kFastMath<T>);
          }
        });
        round_into_pack(g, gs[p]);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        part_g += g[k] * w[k];
        part_gx += kFromOutput ? g[k] * v[k] : g[k] * w[k] * v[k];
        gv[k] = g[k] * v[k];
      }
      acc.add(p, gv, g);
    }
    const float mean_g = kRms ? 0.0f : group.sum(part_g, scratch) / static_cast<float>(cols);
    const float mean_gx = group.sum(part_gx, scratch) / static_cast<float>(cols);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = group.rank() * V + p * step;
      if (c >= ncols) break;
      float w[V], b[V] = {}, inv_w[V], d[V];
      if constexpr (kFromOutput) {
        params.read(p, kWeightSlice, w);
        if constexpr (!kRms) params.read(p, kBiasSlice, b);
        params.read(p, kInverseWeightSlice, inv_w);
      } else {
        load_vec<T, V>(weight + c, w);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = kFromOutput ? (element(xs[p], k) - b[k]) * inv_w[k] : fmaf(element(xs[p], k), rstd, shift);
        d[k] = rstd * (element(gs[p], k) * w[k] - mean_g - xhat * mean_gx);
      }
      if (addend) {  // the residual stream's gradient, added before the one rounding to T
        float a[V];
        load_vec<T, V>(addend + r * cols + c, a);
#pragma unroll
        for (int k = 0; k < V; ++k) d[k] += a[k];
      }
      if (sum_dx) {  // as stored: rounded to T (storing a rounded value rounds nothing more)
#pragma unroll
        for (int k = 0; k < V; ++k) d[k] = rounded<T>(d[k]);
        if constexpr (kDxSumsInRegisters<kWarpRows, kEpilogue>) {
#pragma unroll
          for (int k = 0; k < V; ++k) dx_sums[p][k] += d[k];
        } else {
          acc.add_one(p, kDxSumSlice, d);
        }
      }
      store_vec<T, V>(dx + r * cols + c, d);
    }
  }
  // The row group's dx sums, where the block's sum below reads them: the first words of the
  // warp's stages (its copies all landed; the loop's last wait left only an empty group), or
  // the third slice.
  auto dx_sum_words = [&](int g) {
    return dx_sums_in_stages ? reinterpret_cast<float*>(stages_base) + g * (4 * padded * sizeof(T) / sizeof(float))
                             : slices + (g * slice_rows + kDxSumSlice) * padded;
  };
  if constexpr (kDxSumsInRegisters<kWarpRows, kEpilogue>) {
    if (sum_dx) {
      if (dx_sums_in_stages) mma::wait_copies<0>();
      const SliceWords<V> words{dx_sum_words(threadIdx.x / 32) + group.rank() * kSliceWidth<V>, group.size(), padded};
#pragma unroll
      for (int p = 0; p < P; ++p)
        if (group.rank() * V + p * step < ncols) words.write(p, 0, dx_sums[p]);
    }
  }
  __syncthreads();
  // This block's partial: its row groups' slices added in group order.
  for (int j = threadIdx.x; j < ncols; j += blockDim.x) {
    const int at = slice_index<V>(j, group.size(), step);
    float dweight = 0.0f, dbias = 0.0f, dx_sum = 0.0f;
    for (int g = 0; g < groups; ++g) {
      dweight += slices[g * slice_rows * padded + at];
      dbias += slices[g * slice_rows * padded + padded + at];
      if (sum_dx) dx_sum += dx_sum_words(g)[at];
    }
    // A partial row per block: dweight, dbias (and dx's sums), whatever shared memory held them.
    float* partial = partials + blockIdx.x * partial_sums(sum_dx) * cols;
    partial[j] = dweight;
    partial[cols + j] = dbias;
    if (sum_dx) partial[2 * cols + j] = dx_sum;
    // A zero weight erased x̂ from the output: dx and dweight are NaN there, and the caller
    // learns why at its next synchronizing read.
    if (kFromOutput && blockIdx.x == 0 && to_acc(weight[j]) == 0.0f) atomicOr(error_word, kNormZeroWeight);
  }
}

// out[j] = Σ_b partials[b, j] over j in [sums, cols] (dweight, dbias, and with sums = 3 the
// dx column sums), dweight divided by weight_divisor[j] when given (the backward summed
// dy·x̂·w): sum_partial_rows (partial_rows.cuh) over the blocks' partial rows, 8 loads in flight.
template <class T>
__global__ void __launch_bounds__(kPartialRowWarps * 32)
    sum_partials_kernel(const float* partials, int blocks, int sums, int64_t cols, const T* weight_divisor,
                        GradSink<T> dweight, GradSink<T> dbias, GradSink<T> dx_sums) {
  begin_dependent_kernel();
  const int64_t j = blockIdx.x * 32LL + threadIdx.x % 32, stride = sums * cols;
  const float total = sum_partial_rows<8>(partials, blocks, stride, j, j < stride);
  if (threadIdx.x >= 32 || j >= stride) return;
  if (j < cols) {
    if (dweight.any()) dweight.store(j, weight_divisor ? total / to_acc(weight_divisor[j]) : total);
  } else if (j < 2 * cols) {
    if (dbias.any()) dbias.store(j - cols, total);
  } else if (dx_sums.any()) {
    dx_sums.store(j - 2 * cols, total);
  }
}

struct Launch {
  bool warp_rows;
  int threads;
};

// Warp mode when a row fits in 32 lanes' packs; otherwise a block per row, sized so that each
// thread holds at most kBlockPacks packs.
Launch plan(int64_t cols, int vec) {
  const int64_t packs = (cols + vec - 1) / vec;
  if (packs <= 32 * kWarpPacks) return {true, kBlockThreads};
  const int64_t threads = (packs + kBlockPacks - 1) / kBlockPacks;
  return {false, static_cast<int>(std::max<int64_t>(64, (threads + 31) / 32 * 32))};
}

/// Calls body(element tag, pack width, RMS?, warp rows?, packs per thread, epilogue?, launch)
/// with the compile-time configuration of a norm kernel. The epilogue variant exists for
/// LayerNorm only (RMSNorm has no activation or dropout form).
template <class Body>
void with_norm_config(NormKind kind, DType dtype, int64_t cols, std::initializer_list<const void*> pointers,
                      bool epilogue, Body&& body) {
  dispatch_half_float(dtype, "norm", [&](auto tag) {
    using T = decltype(tag);
    auto pick = [&](auto vec) {
      const Launch launch = plan(cols, decltype(vec)::value);
      auto pick_mode = [&](auto rms, auto epi) {
        if (launch.warp_rows)
          body(tag, vec, rms, std::true_type{}, std::integral_constant<int, kWarpPacks>{}, epi, launch);
        else body(tag, vec, rms, std::false_type{}, std::integral_constant<int, kBlockPacks>{}, epi, launch);
      };
      if (kind == NormKind::RMS) pick_mode(std::true_type{}, std::false_type{});
      else if (epilogue) pick_mode(std::false_type{}, std::true_type{});
      else pick_mode(std::false_type{}, std::false_type{});
    };
    if (packable<T>(cols, pointers)) pick(std::integral_constant<int, kPackSize<T>>{});
    else pick(std::integral_constant<int, 1>{});
  });
}

unsigned grid_for(const Launch& launch, int64_t rows, int64_t max_blocks) {
  const int64_t per_block = launch.warp_rows ? launch.threads / 32 : 1;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + per_block - 1) / per_block, max_blocks)));
}

}  // namespace

bool norm_supported(int64_t cols) { return cols >= 1 && cols <= 1024 * kBlockPacks; }

namespace {
Epilogue device_epilogue(const NormEpilogue& e) {
  Epilogue d;
  d.act = e.act;
  d.p = static_cast<float>(e.dropout_p);
  d.scale = e.dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - e.dropout_p)) : 1.0f;
  d.seed = e.seed;
  d.offset = e.dropout_p > 0.0 ? e.offset.data<int64_t>() : nullptr;
  d.mask = e.dropout_p > 0.0 && e.mask.defined() ? e.mask.data<uint8_t>() : nullptr;
  return d;
}
}  // namespace

bool norm_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                  double eps, const Tensor& sum, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                  const NormEpilogue& epilogue) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.data_ptr() : nullptr; };
  FT_CHECK(!epilogue.mask.defined() ||
               (epilogue.mask.dtype() == DType::U8 && epilogue.mask.numel() >= (x.numel() + 7) / 8),
           "norm forward: the dropout mask must hold ", (x.numel() + 7) / 8, " bytes (U8), got ",
           epilogue.mask.numel(), " ", dtype_name(epilogue.mask.dtype()));
  bool mask_written = false;
  with_norm_config(
      kind, x.dtype(), cols, {ptr(x), ptr(residual), ptr(weight), ptr(bias), ptr(sum), ptr(out)}, epilogue.active(),
      [&](auto tag, auto vec, auto rms, auto warp_rows, auto packs, auto epi, const Launch& launch) {
        using T = decltype(tag);
        constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
        constexpr bool kR = decltype(rms)::value, kW = decltype(warp_rows)::value;
        auto kernel = norm_forward_kernel<T, V, P, kR, kW, decltype(epi)::value>;
        mask_written = decltype(epi)::value && V % 8 == 0 && epilogue.dropout_p > 0.0 && epilogue.mask.defined();
        launch_dependent(kernel, grid_for(launch, rows, 64LL * multiprocessor_count()), launch.threads, 0, x.data<T>(),
                         static_cast<const T*>(ptr(residual)), weight.data<T>(), static_cast<const T*>(ptr(bias)),
                         sum.defined() ? sum.data<T>() : nullptr, out.data<T>(),
                         mean.defined() ? mean.data<float>() : nullptr, rstd.data<float>(), rows, cols,
                         static_cast<float>(eps), device_epilogue(epilogue));
        FT_CUDA_CHECK_LAUNCH("norm_forward_kernel");
      });
  return mask_written;
}

void norm_backward(NormKind kind, const Tensor& dy, const Tensor& saved, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias,
                   const NormEpilogue& epilogue, const Tensor& bias, const Tensor& addend,
                   const GradOutput& dx_column_sums) {
  const int64_t cols = saved.size(-1), rows = saved.numel() / cols;
  const bool from_output = !epilogue.active();
  // The RMS kernels have no epilogue form (with_norm_config runs the plain ones).
  FT_CHECK(kind == NormKind::Layer || !epilogue.active(), "norm backward: RMSNorm has no activation or dropout form");
  FT_CHECK(!dx_column_sums.defined() || dx_column_sums.tensor.numel() == cols,
           "norm backward: dx's column sums need ", cols, " elements, got ", dx_column_sums.tensor.numel());
  Epilogue device_epi = device_epilogue(epilogue);
  device_epi.sum_dx = dx_column_sums.defined();
  const int sums = partial_sums(device_epi.sum_dx);
  FT_CHECK(!addend.defined() || (addend.shape() == saved.shape() && addend.dtype() == saved.dtype()),
           "norm backward: the addend must be ", shape_str(saved.shape()), " ", dtype_name(saved.dtype()), ", got ",
           shape_str(addend.shape()), " ", dtype_name(addend.dtype()));
  FT_CHECK(kind == NormKind::RMS || (from_output ? bias.defined() : mean.defined()), "norm backward: LayerNorm needs ",
           from_output ? "the bias to take x̂ from its output" : "the saved mean with an epilogue");
  const void* addend_ptr = addend.defined() ? addend.data_ptr() : nullptr;
  with_norm_config(
      kind, saved.dtype(), cols,
      {dy.data_ptr(), saved.data_ptr(), weight.data_ptr(), dx.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr,
       addend_ptr},
      epilogue.active(), [&](auto tag, auto vec, auto rms, auto warp_rows, auto packs, auto epi, const Launch& launch) {
        using T = decltype(tag);
        constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
        constexpr bool kR = decltype(rms)::value, kW = decltype(warp_rows)::value;
        auto kernel = norm_backward_kernel<T, V, P, kR, kW, decltype(epi)::value>;
        const int step = (launch.warp_rows ? 32 : launch.threads) * decltype(vec)::value;
        const size_t padded = static_cast<size_t>(padded_cols(static_cast<int>(cols), step));
        // The kernel's own notion of a plain norm (RMS always runs the plain kernels), so the
        // column parameters it writes always have their room.
        constexpr bool kPlain = !decltype(epi)::value;
        // The slices (dweight, dbias, and dx's column sums when asked and not kept in the staged
        // rows' memory; the column parameters in the plain norms), then for staged rows each
        // warp's 2 stages of (saved, dy).
        constexpr bool kInRegisters = kDxSumsInRegisters<kW, decltype(epi)::value>;
        auto shared_bytes = [&](bool staged) {
          const size_t groups = launch.warp_rows ? launch.threads / 32 : 1;
          const size_t slice_rows = group_slice_rows(device_epi.sum_dx, kInRegisters && staged);
          const size_t slices = (groups * slice_rows + (kPlain ? kColumnParamSlices : 0)) * padded * sizeof(float);
          return slices + (staged ? groups * 4 * padded * sizeof(T) : 0);
        };
        static_assert(4 * sizeof(T) >= sizeof(float), "a warp's stages hold its dx sums (padded floats)");
        // Rows are staged only while kNormBackwardBlocks blocks still fit: at C = 1024 (the MLP)
        // the stages would leave one block an SM, and the MLP's step slowed from 0.385 to 0.414 ms.
        const bool stage_rows = kStagedRows<T, V, kW, decltype(epi)::value> &&
                                kNormBackwardBlocks * (shared_bytes(true) + 1024) <= shared_memory_per_multiprocessor();
        const size_t smem = shared_bytes(stage_rows);
        // Whatever the size: the 48 KB default covers static and dynamic shared memory together,
        // so a dynamic size just under it plus the kernel's static scratch would not launch. Set
        // once per kernel and size reached (it was a host call every backward).
        static int opted_in_bytes = -1;
        if (static_cast<int>(smem) > opted_in_bytes) {
          FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
          opted_in_bytes = static_cast<int>(smem);
        }
        // As many blocks as fit at once (kNormBackwardBlocks per multiprocessor in warp
        // mode, bounded by the slices' shared memory); each adds one partial row.
        int resident = 0;
        FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, launch.threads, smem));
        const int per_sm = std::clamp(resident, 1, launch.warp_rows ? kNormBackwardBlocks : 2);
        const unsigned blocks = grid_for(launch, rows, static_cast<int64_t>(per_sm) * multiprocessor_count());
        ColumnScratch scratch = column_scratch(blocks, sums * cols, 1);
        launch_dependent(kernel, blocks, launch.threads, smem, dy.data<T>(), saved.data<T>(), weight.data<T>(),
                         mean.defined() ? mean.data<float>() : nullptr, rstd.data<float>(), dx.data<T>(),
                         scratch.partials, rows, cols, bias.defined() ? bias.data<T>() : nullptr, device_epi,
                         static_cast<const T*>(addend_ptr), device_error_word(), stage_rows);
        FT_CUDA_CHECK_LAUNCH("norm_backward_kernel");
        if (dweight.defined() || dbias.defined() || dx_column_sums.defined()) {
          launch_dependent(sum_partials_kernel<T>, static_cast<unsigned>((sums * cols + 31) / 32),
                           kPartialRowWarps * 32, 0, scratch.partials, static_cast<int>(blocks), sums, cols,
                           kPlain ? weight.data<T>() : nullptr,
                           grad_sink<T>(dweight), grad_sink<T>(dbias), grad_sink<T>(dx_column_sums));
          FT_CUDA_CHECK_LAUNCH("sum_partials_kernel");
        }
      });
}

}  // namespace ft::cuda
