// What the fused norm kernels share (norm_forward.cu, norm_backward.cu): how a row is split across
// a warp or a block, the shared-memory slices the backward adds columns into, the dropout keep
// bits, the epilogue as the kernels see it, and the launch configuration.
#pragma once
#include <algorithm>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/grad_sink.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/partial_rows.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/norm/norm_cuda.h"

namespace ft::cuda::norm_kernels {

constexpr int kWarpPacks = 4;    // packs per lane in warp mode
constexpr int kBlockPacks = 8;   // packs per thread in block mode
constexpr int kBlockThreads = 256;  // warp mode: 8 rows per block
// Warp-mode backward blocks per multiprocessor: 4 would bound it to 64 registers, and it spilled.
constexpr int kNormBackwardBlocks = 2;
// Warp-mode forward blocks per multiprocessor the registers must allow: 4 (64 registers) hold
// the MLP's 4096 rows of 1024 (512 blocks, a row a warp) in one wave; unbounded, the LayerNorm +
// GELU + Dropout epilogue took more registers, 3 blocks fitted, and a second wave ran.
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
/// third slice did not fit beside the staged rows (8 staged warps an SM became 6, and the
/// backward slowed). The epilogue kernels (128 registers already) and the block-
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
  // of from dx again by cuBLASLt's BGRADB kernel. Both forms; the plain one takes it in GPT-2.
  bool sum_dx = false;
};

// kEpilogue is a compile-time switch: the epilogue's code in the plain kernels grew their
// registers and slowed residual + LayerNorm.

struct Launch {
  bool warp_rows;
  int threads;
};

// Warp mode when a row fits in 32 lanes' packs; otherwise a block per row, sized so that each
// thread holds at most kBlockPacks packs.
inline Launch plan(int64_t cols, int vec) {
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

inline unsigned grid_for(const Launch& launch, int64_t rows, int64_t max_blocks) {
  const int64_t per_block = launch.warp_rows ? launch.threads / 32 : 1;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + per_block - 1) / per_block, max_blocks)));
}

inline Epilogue device_epilogue(const NormEpilogue& e) {
  Epilogue d;
  d.act = e.act;
  d.p = static_cast<float>(e.dropout_p);
  d.scale = e.dropout_p > 0.0 ? static_cast<float>(1.0 / (1.0 - e.dropout_p)) : 1.0f;
  d.seed = e.seed;
  d.offset = e.dropout_p > 0.0 ? e.offset.data<int64_t>() : nullptr;
  d.mask = e.dropout_p > 0.0 && e.mask.defined() ? e.mask.data<uint8_t>() : nullptr;
  return d;
}

}  // namespace ft::cuda::norm_kernels
