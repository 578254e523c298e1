// C = A·Bᵀ on Hopper (contract: hopper_gemm.h), the plain form the fused products will start
// from. A block computes a 128 × 256 tile of C:
// - one thread of a ninth warp (the producer) streams 64-wide K slices of A's 128 rows
//   and B's 256 rows into a ring of kStages shared-memory stages with TMA (128-byte swizzle,
//   rows and columns past the matrix zero-filled), each stage's "landed" barrier counting the
//   bytes; it refills a stage once both consumers have released it ("empty" barrier);
// - two consumer warpgroups of 64 rows each issue m64n256k16 wgmma over the stage (both
//   operands K-major in shared memory), keep one batch in flight, and release the stage of the
//   batch before. With the producer one warp (288 threads), a thread keeps within 168
//   registers, the 128 accumulators and the epilogue's, without spilling (__maxnreg__(224)
//   compiled but could not launch; setmaxnreg did not lift ptxas's cap either);
// - the epilogue rounds each consumer's f32 accumulators to bf16 into shared memory (the TMA
//   store's swizzle) and one thread starts their TMA store, which runs beside the next tile's
//   products (the ring has 3 stages to leave room for the two consumers' 32 KB of rows).
// Persistent, one block a multiprocessor: the producer runs on into the block's next tile while
// the consumers store the last. Tiles are visited in groups of kGroupRows tile rows, column by
// column, so that the blocks at work share their A rows and B rows in L2.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/runtime.h"
#include "lib/cuda/swizzled_tile.cuh"
#include "lib/cuda/tensor_map.h"
#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"
#include "lib/error.h"
#include "lib/ops/matmul/hopper_gemm.h"

namespace ft::cuda {

namespace {

constexpr int kTileM = 128;                 // rows of A (of C) a block takes: 64 a consumer
constexpr int kTileN = 256;                 // rows of B (columns of C)
constexpr int kSlice = swizzled::kBoxCols;  // K columns a stage holds: one 128-byte swizzle row
constexpr int kStages = 3;
constexpr int kThreads = 288;               // two consumer warpgroups and the producer's warp
constexpr int kGroupRows = 8;               // tile rows visited together (L2 reuse)
constexpr uint32_t kOperandBytes = kTileM * kSlice * 2, kStageBytes = kOperandBytes + kTileN * kSlice * 2;
// Each consumer's 64 rows of C, staged for the TMA store: kTileN / 64 boxes of 64 rows × 128 bytes.
constexpr uint32_t kStagingBytes = 64 * kTileN * 2, kStagingBoxBytes = 64 * swizzled::kRowBytes;
constexpr size_t kStagingOffset = kStages * kStageBytes;
constexpr size_t kBarrierOffset = kStagingOffset + 2 * kStagingBytes;
constexpr size_t kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + the barriers, + alignment slack

struct GemmShape {
  int m, n, k;
};

/// The RoPE epilogue's tables (rope_tables: f32 [T, HS/2]); cos null: none.
struct RopeRows {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int tokens = 0, head_size = 0;
};

/// Block `block`'s tile, in groups of kGroupRows tile rows walked column by column.
__device__ __forceinline__ int2 tile_of(int block, int row_tiles, int column_tiles) {
  const int per_group = kGroupRows * column_tiles, group = block / per_group;
  const int first_row = group * kGroupRows, rows = min(kGroupRows, row_tiles - first_row);
  const int within = block % per_group;
  return {first_row + within % rows, within / rows};
}

/// Where a block's ring stands: slice g of the block's whole run (all its tiles) sits in stage
/// g % kStages, in that stage's round g / kStages.
struct Ring {
  unsigned char* smem;
  uint64_t* landed;  // per stage: the copy has landed (phase = round)
  uint64_t* empty;   // per stage: both consumers are done with it
  __device__ unsigned char* stage(int g) const { return smem + (g % kStages) * kStageBytes; }
  __device__ unsigned round_parity(int g) const { return static_cast<unsigned>(g / kStages) & 1; }
};

/// The producer thread: every slice of every tile of the block, in order, each into the next
/// stage once the consumers have released its previous round.
__device__ void produce(const Ring& ring, const CUtensorMap& a_map, const CUtensorMap& b_map, int row_tiles,
                        int column_tiles, int slices) {
  int g = 0;
  for (int t = blockIdx.x; t < row_tiles * column_tiles; t += gridDim.x) {
    const int2 tile = tile_of(t, row_tiles, column_tiles);
    for (int kt = 0; kt < slices; ++kt, ++g) {
      const int s = g % kStages;
      if (g >= kStages) tma::wait(ring.empty + s, ring.round_parity(g) ^ 1);
      tma::arrive_expecting(ring.landed + s, kStageBytes);
      tma::load_4d(ring.stage(g), a_map, ring.landed + s, kt * kSlice, tile.x * kTileM, 0, 0);
      tma::load_4d(ring.stage(g) + kOperandBytes, b_map, ring.landed + s, kt * kSlice, tile.y * kTileN, 0, 0);
    }
  }
}

/// One consumer warpgroup's 64 × kTileN share of a tile: the slices from ring position g on,
/// one batch of products in flight, each stage released once its batch is done.
__device__ void consume(const Ring& ring, int& g, int slices, int consumer, float (&acc)[kTileN / 8][4]) {
  const bool releases = threadIdx.x % 128 == 0;
  for (int kt = 0; kt < slices; ++kt, ++g) {
    const unsigned char* const stage = ring.stage(g);
    tma::wait(ring.landed + g % kStages, ring.round_parity(g));
    wgmma::pin(acc);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < kSlice / 16; ++k)
      wgmma::mma_ss(acc, swizzled::k_major_slice<kTileM>(stage, 64 * consumer, k),
                    swizzled::k_major_slice<kTileN>(stage + kOperandBytes, 0, k), kt > 0 || k > 0);
    wgmma::commit();
    wgmma::wait<1>();  // the batch before this one is done: its stage may be refilled
    wgmma::pin(acc);
    if (kt > 0 && releases) tma::arrive(ring.empty + (g - 1) % kStages);
  }
  wgmma::wait<0>();
  wgmma::pin(acc);
  if (releases) tma::arrive(ring.empty + (g - 1) % kStages);
}

/// Where a thread writes its pairs of one row in a consumer's staged rows (the TMA store's
/// 128-byte swizzle: the 8 rows a warp writes at once fall in 8 different bank groups).
struct StagedRow {
  unsigned char* at;  // the row's start plus the thread's 4 bytes within a 16-byte chunk
  int key;            // the row's swizzle: chunk c sits at c ^ key
  /// The bf16 pair (v0, v1) in 8-column block j (0 .. kTileN / 8) of the row.
  __device__ __forceinline__ void put(int j, float v0, float v1) const {
    *reinterpret_cast<__nv_bfloat162*>(at + (j / 8) * kStagingBoxBytes + (((j % 8) ^ key) << 4)) =
        __floats2bfloat162_rn(v0, v1);
  }
};

__device__ __forceinline__ StagedRow staged_row(unsigned char* staging, int r) {
  return {staging + r * swizzled::kRowBytes + 4 * (threadIdx.x % 4), r & 7};
}

/// The accumulators turned by RoPE before their one rounding (rope.h's rotation: the pair
/// (i, i + HS/2) of each head at token r % T), then staged. A thread holds both columns of
/// every pair: the 8-column block j of a head pairs with block j + HS/16 (the tile's columns
/// start at a head). Each pair is turned and staged in one go, so that only its own table
/// values are live beside the accumulators.
template <int kHeadSize>
__device__ void store_turned(unsigned char* staging, int row, int token_row, const float (&acc)[kTileN / 8][4],
                             const RopeRows& rope) {
  constexpr int kHalfBlocks = kHeadSize / 16;  // 8-column blocks in half a head
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const StagedRow out = staged_row(staging, row + 8 * h);
    const int token = (token_row + 8 * h) % rope.tokens;
    const float* const cos_row = rope.cos + static_cast<int64_t>(token) * (kHeadSize / 2);
    const float* const sin_row = rope.sin + static_cast<int64_t>(token) * (kHeadSize / 2);
#pragma unroll
    for (int jj = 0; jj < kHalfBlocks; ++jj) {
      const int i = 8 * jj + 2 * (lane % 4);
      const float2 cs = __ldg(reinterpret_cast<const float2*>(cos_row + i));
      const float2 sn = __ldg(reinterpret_cast<const float2*>(sin_row + i));
#pragma unroll
      for (int head = 0; head < kTileN / kHeadSize; ++head) {
        const int j = head * 2 * kHalfBlocks + jj;
        const float* const x = acc[j] + 2 * h;
        const float* const y = acc[j + kHalfBlocks] + 2 * h;
        out.put(j, x[0] * cs.x - y[0] * sn.x, x[1] * cs.y - y[1] * sn.y);
        out.put(j + kHalfBlocks, y[0] * cs.x + x[0] * sn.x, y[1] * cs.y + x[1] * sn.y);
      }
    }
  }
}

/// Syncs the 128 threads of consumer `consumer` (named barriers 1 and 2; 0 is __syncthreads').
__device__ __forceinline__ void consumer_sync(int consumer) {
  if (consumer == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

/// Rounds a consumer's accumulators to bf16 (turned by RoPE first when rope.cos is set) into its
/// staged rows, then one thread starts their TMA store (clipped to C) and returns at once: the
/// store runs beside the next tile's products. The staged rows are written again only after
/// the previous store has read them.
__device__ void store_tile(const CUtensorMap& c_map, unsigned char* staging, int m0, int n0, int consumer,
                           const float (&acc)[kTileN / 8][4], const RopeRows& rope) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, row = 16 * warp + lane / 4;
  const bool issues = threadIdx.x % 128 == 0;
  if (issues) tma::wait_stores_read();
  consumer_sync(consumer);
  if (rope.cos != nullptr) {
    const int token_row = m0 + 64 * consumer + row;
    if (rope.head_size == 64) store_turned<64>(staging, row, token_row, acc, rope);
    else store_turned<128>(staging, row, token_row, acc, rope);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const StagedRow out = staged_row(staging, row + 8 * h);
#pragma unroll
      for (int j = 0; j < kTileN / 8; ++j) out.put(j, acc[j][2 * h], acc[j][2 * h + 1]);
    }
  }
  tma::fence_shared_to_async();
  consumer_sync(consumer);
  if (issues) {
#pragma unroll
    for (int box = 0; box < kTileN / swizzled::kBoxCols; ++box)
      tma::store_4d(c_map, staging + box * kStagingBoxBytes, n0 + box * swizzled::kBoxCols, m0 + 64 * consumer, 0, 0);
    tma::commit_stores();
  }
}

// Persistent: a block a multiprocessor walks the tiles blockIdx.x, + gridDim.x, ...; the
// producer runs ahead into the next tile while the consumers store the last one.
__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                       const __grid_constant__ CUtensorMap c_map, GemmShape shape, RopeRows rope) {
  begin_dependent_kernel();  // launched plainly for now: the wait is free
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw_smem[];
  unsigned char* const smem = tma::align_1024(raw_smem);
  const Ring ring{smem, reinterpret_cast<uint64_t*>(smem + kBarrierOffset),
                  reinterpret_cast<uint64_t*>(smem + kBarrierOffset) + kStages};
  const int row_tiles = (shape.m + kTileM - 1) / kTileM, column_tiles = (shape.n + kTileN - 1) / kTileN;
  const int slices = (shape.k + kSlice - 1) / kSlice, warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      tma::init_barrier(ring.landed + s, 1);
      tma::init_barrier(ring.empty + s, 2);  // one arrival per consumer warpgroup
    }
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (warpgroup == 2) {
    if (threadIdx.x != 256) return;
    tma::prefetch_map(a_map);
    tma::prefetch_map(b_map);
    produce(ring, a_map, b_map, row_tiles, column_tiles, slices);
    return;
  }
  float acc[kTileN / 8][4];
  int g = 0;
  for (int t = blockIdx.x; t < row_tiles * column_tiles; t += gridDim.x) {
    const int2 tile = tile_of(t, row_tiles, column_tiles);
    consume(ring, g, slices, warpgroup, acc);
    store_tile(c_map, smem + kStagingOffset + warpgroup * kStagingBytes, tile.x * kTileM, tile.y * kTileN, warpgroup,
               acc, rope);
  }
  if (threadIdx.x % 128 == 0) tma::wait_stores();  // the staged rows live until the last store is done
#else
  __trap();  // dispatched only on sm_90 (hopper_gemm_supported)
#endif
}

/// A [rows, K] row-major bf16 matrix, read (or, for C, written) in boxes of box_rows rows ×
/// kSlice columns.
TensorMapRequest rows_map(const Tensor& t, int box_rows) {
  const int64_t rows = t.size(0), cols = t.size(1);
  return TensorMapRequest{t.data_ptr(), {cols, rows, 1, 1}, {cols, rows * cols, rows * cols}, {kSlice, box_rows, 1, 1}};
}

}  // namespace

bool hopper_gemm_supported(const Tensor& a, const Tensor& b) {
#if defined(FT_HOPPER_KERNELS)
  return compute_capability() == 90 && a.dtype() == DType::BF16 && b.dtype() == DType::BF16 && a.dim() == 2 &&
         b.dim() == 2 && a.size(1) == b.size(1) && a.size(1) > 0 && b.size(0) % 8 == 0 &&
         tensor_map_possible(rows_map(a, kTileM)) && tensor_map_possible(rows_map(b, kTileN));
#else
  (void)a, (void)b;
  return false;
#endif
}

void hopper_gemm(const Tensor& a, const Tensor& b, const Tensor& out, const std::optional<GemmRope>& rope) {
  FT_CHECK(hopper_gemm_supported(a, b), "hopper_gemm: needs sm_90 and bf16 [M, K], [N, K] with K and N multiples of 8, "
           "got ", shape_str(a.shape()), " ", dtype_name(a.dtype()), " and ", shape_str(b.shape()), " ",
           dtype_name(b.dtype()));
  FT_CHECK(out.dtype() == DType::BF16 && out.shape() == Shape({a.size(0), b.size(0)}), "hopper_gemm: out must be bf16 [",
           a.size(0), ", ", b.size(0), "], got ", shape_str(out.shape()));
  const GemmShape shape{static_cast<int>(a.size(0)), static_cast<int>(b.size(0)), static_cast<int>(a.size(1))};
  if (shape.m == 0 || shape.n == 0) return;
  RopeRows rows;
  RopeTables tables;  // kept alive until the launch is enqueued (the tables themselves are cached)
  if (rope) {
    FT_CHECK((rope->head_size == 64 || rope->head_size == 128) && rope->tokens > 0 && shape.m % rope->tokens == 0 &&
                 shape.n % rope->head_size == 0,
             "hopper_gemm: the RoPE epilogue needs heads of 64 or 128 columns and rows a multiple of T, got [",
             shape.m, ", ", shape.n, "] with T ", rope->tokens, ", HS ", rope->head_size);
    check_rope_config(rope->config);
    tables = rope_tables(rope->tokens, rope->head_size, rope->config, DType::F32, out.device());
    rows = RopeRows{tables.cos.data<float>(), tables.sin.data<float>(), static_cast<int>(rope->tokens),
                    static_cast<int>(rope->head_size)};
  }
  const CUtensorMap a_map = encode_tensor_map(rows_map(a, kTileM)), b_map = encode_tensor_map(rows_map(b, kTileN));
  FT_CHECK(tensor_map_possible(rows_map(out, 64)), "hopper_gemm: out must be 16-byte aligned");
  const CUtensorMap c_map = encode_tensor_map(rows_map(out, 64));
  const int64_t tiles = ((shape.m + kTileM - 1) / kTileM) * ((shape.n + kTileN - 1) / kTileN);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, multiprocessor_count()));
  FT_CUDA_CHECK(cudaFuncSetAttribute(hopper_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  hopper_gemm_kernel<<<blocks, kThreads, kSmemBytes, stream()>>>(
      a_map, b_map, c_map, shape, rows);
  FT_CUDA_CHECK_LAUNCH("hopper_gemm_kernel");
}

}  // namespace ft::cuda
