// C = A·Bᵀ on Hopper (contract: hopper_gemm.h), the plain form the fused products will start
// from. A block computes a 128 × 128 tile of C:
// - one thread of the first warpgroup (the producer) streams 64-wide K slices of A's 128 rows
//   and B's 128 rows into a ring of kStages shared-memory stages with TMA (128-byte swizzle,
//   rows and columns past the matrix zero-filled), each stage's "landed" barrier counting the
//   bytes; it refills a stage once both consumers have released it ("empty" barrier);
// - two consumer warpgroups of 64 rows each issue m64n128k16 wgmma over the stage (both
//   operands K-major in shared memory), keep one batch in flight, and release the stage of the
//   batch before;
// - the epilogue rounds the f32 accumulators to bf16 and stores them straight from registers.
// One block a multiprocessor (the consumers need more than 80 registers a thread). Tiles
// are visited in groups of kGroupRows tile rows, column by column, so that a wave of blocks
// shares its A rows and B rows in L2.
#include <cuda.h>
#include <cuda_bf16.h>

#include "lib/cuda/runtime.h"
#include "lib/cuda/tensor_map.h"
#include "lib/cuda/tma.cuh"
#include "lib/cuda/wgmma.cuh"
#include "lib/error.h"
#include "lib/ops/attention/swizzled_tile.cuh"
#include "lib/ops/matmul/hopper_gemm.h"

namespace ft::cuda {

namespace {

constexpr int kTile = 128;                  // rows of A and of B (columns of C) a block takes
constexpr int kSlice = swizzled::kBoxCols;  // K columns a stage holds: one 128-byte swizzle row
constexpr int kStages = 5;
constexpr int kThreads = 384;               // the producer warpgroup and two consumers
constexpr int kGroupRows = 8;               // tile rows visited together (L2 reuse)
constexpr uint32_t kOperandBytes = kTile * kSlice * 2, kStageBytes = 2 * kOperandBytes;
constexpr size_t kBarrierOffset = kStages * kStageBytes;
constexpr size_t kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + the barriers, + alignment slack

struct GemmShape {
  int m, n, k;
};

/// Block `block`'s tile, in groups of kGroupRows tile rows walked column by column.
__device__ __forceinline__ int2 tile_of(int block, int row_tiles, int column_tiles) {
  const int per_group = kGroupRows * column_tiles, group = block / per_group;
  const int first_row = group * kGroupRows, rows = min(kGroupRows, row_tiles - first_row);
  const int within = block % per_group;
  return {first_row + within % rows, within / rows};
}

__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                       __nv_bfloat16* __restrict__ c, GemmShape shape) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char raw_smem[];
  unsigned char* const smem = tma::align_1024(raw_smem);
  uint64_t* const landed = reinterpret_cast<uint64_t*>(smem + kBarrierOffset);
  uint64_t* const empty = landed + kStages;
  const int2 tile = tile_of(blockIdx.x, (shape.m + kTile - 1) / kTile, (shape.n + kTile - 1) / kTile);
  const int m0 = tile.x * kTile, n0 = tile.y * kTile, slices = (shape.k + kSlice - 1) / kSlice;
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      tma::init_barrier(landed + s, 1);
      tma::init_barrier(empty + s, 2);  // one arrival per consumer warpgroup
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    if (threadIdx.x != 0) return;
    tma::prefetch_map(a_map);
    tma::prefetch_map(b_map);
    for (int kt = 0; kt < slices; ++kt) {
      const int s = kt % kStages;
      // The consumers' release of this stage's previous round (none before the first).
      if (kt >= kStages) tma::wait(empty + s, static_cast<unsigned>(kt / kStages - 1) & 1);
      unsigned char* const stage = smem + s * kStageBytes;
      tma::arrive_expecting(landed + s, kStageBytes);
      tma::load_4d(stage, a_map, landed + s, kt * kSlice, m0, 0, 0);
      tma::load_4d(stage + kOperandBytes, b_map, landed + s, kt * kSlice, n0, 0, 0);
    }
    return;
  }

  const int consumer = warpgroup - 1;
  float acc[kTile / 8][4];
  for (int kt = 0; kt < slices; ++kt) {
    const int s = kt % kStages;
    const unsigned char* const stage = smem + s * kStageBytes;
    tma::wait(landed + s, static_cast<unsigned>(kt / kStages) & 1);
    wgmma::pin(acc);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < kSlice / 16; ++k)
      wgmma::mma_ss(acc, swizzled::k_major_slice<kTile>(stage, 64 * consumer, k),
                    swizzled::k_major_slice<kTile>(stage + kOperandBytes, 0, k), kt > 0 || k > 0);
    wgmma::commit();
    // The batch before this one is done: its stage may be refilled.
    wgmma::wait<1>();
    wgmma::pin(acc);
    if (kt > 0 && threadIdx.x % 128 == 0) tma::arrive(empty + (kt - 1) % kStages);
  }
  wgmma::wait<0>();
  wgmma::pin(acc);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const int row = m0 + 64 * consumer + 16 * warp + lane / 4;
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j) {
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= shape.n) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row + 8 * half;
      if (r < shape.m)
        *reinterpret_cast<__nv_bfloat162*>(c + static_cast<int64_t>(r) * shape.n + col) =
            __floats2bfloat162_rn(acc[j][2 * half], acc[j][2 * half + 1]);
    }
  }
#else
  __trap();  // dispatched only on sm_90 (hopper_gemm_supported)
#endif
}

/// A [rows, K] row-major bf16 matrix, read in boxes of kTile rows × kSlice columns.
TensorMapRequest rows_map(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  return TensorMapRequest{t.data_ptr(), {cols, rows, 1, 1}, {cols, rows * cols, rows * cols}, {kSlice, kTile, 1, 1}};
}

}  // namespace

bool hopper_gemm_supported(const Tensor& a, const Tensor& b) {
#if defined(FT_HOPPER_KERNELS)
  return compute_capability() == 90 && a.dtype() == DType::BF16 && b.dtype() == DType::BF16 && a.dim() == 2 &&
         b.dim() == 2 && a.size(1) == b.size(1) && a.size(1) > 0 && b.size(0) % 2 == 0 && tensor_map_possible(rows_map(a)) &&
         tensor_map_possible(rows_map(b));
#else
  (void)a, (void)b;
  return false;
#endif
}

void hopper_gemm(const Tensor& a, const Tensor& b, const Tensor& out) {
  FT_CHECK(hopper_gemm_supported(a, b), "hopper_gemm: needs sm_90 and bf16 [M, K], [N, K] with K a multiple of 8 and N "
           "even, got ", shape_str(a.shape()), " ", dtype_name(a.dtype()), " and ", shape_str(b.shape()), " ",
           dtype_name(b.dtype()));
  FT_CHECK(out.dtype() == DType::BF16 && out.shape() == Shape({a.size(0), b.size(0)}), "hopper_gemm: out must be bf16 [",
           a.size(0), ", ", b.size(0), "], got ", shape_str(out.shape()));
  const GemmShape shape{static_cast<int>(a.size(0)), static_cast<int>(b.size(0)), static_cast<int>(a.size(1))};
  if (shape.m == 0 || shape.n == 0) return;
  const CUtensorMap a_map = encode_tensor_map(rows_map(a)), b_map = encode_tensor_map(rows_map(b));
  const unsigned blocks = static_cast<unsigned>(((shape.m + kTile - 1) / kTile) * ((shape.n + kTile - 1) / kTile));
  FT_CUDA_CHECK(cudaFuncSetAttribute(hopper_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  hopper_gemm_kernel<<<blocks, kThreads, kSmemBytes, stream()>>>(a_map, b_map, static_cast<__nv_bfloat16*>(out.data_ptr()),
                                                                          shape);
  FT_CUDA_CHECK_LAUNCH("hopper_gemm_kernel");
}

}  // namespace ft::cuda
