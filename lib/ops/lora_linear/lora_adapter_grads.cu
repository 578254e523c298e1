// v = dpre·B and dB = s·dpreᵀ·u in one pass over dpre (lib/ops/lora_linear/lora_adapter_grads.h).
//
// Block (i, j) owns rows [i·rows_per_block, ...) and columns [j·cols_per_block, ...) of dpre.
// It walks its rows in subtiles of 128 and, within each, its columns in tiles of 64 (at most
// kColTiles of them), so the dpre tiles arrive in a fixed sequence that cp.async prefetches two
// ahead. For each tile, with R the rank padded to 16 or 32 (zeros past r):
//   v[rows, :R]   += T · B[cols, :R]    8 warps × 16 rows; finished after the block's columns,
//                                       then written (as bf16 v when one block spans OUT, else as
//                                       an f32 partial per column range);
//   dB[cols, :R]  += Tᵀ · u[rows, :R]   warp w: 16 columns (w % 4) × half the rows (w / 4), kept in
//                                       registers for all of the block's columns (kColTiles · 64 · R
//                                       = 8,192 sums per block), written once as an f32 partial.
// Both products read the same shared tile with ldmatrix, plain for T and transposed for Tᵀ. The
// finishing kernel sums the partials in index order, so the result does not depend on timing.
#include <cuda_bf16.h>

#include <algorithm>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/mma.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/lora_linear/lora_adapter_grads.h"

namespace ft::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kTileRows = 128;
constexpr int kTileCols = 64;
constexpr int kStages = 3;
constexpr int kTileStride = kTileCols + 8;  // bf16 per shared row: 144 bytes, so ldmatrix rows hit distinct banks
constexpr int kBlockSums = 8192;            // dB sums a block keeps in registers: kColTiles · 64 · R (64 a thread)

template <int R>
struct Layout {
  static constexpr int kColTiles = kBlockSums / (kTileCols * R);  // 8, 4
  static constexpr int kCols = kColTiles * kTileCols;             // the most columns a block owns: 512, 256
  static constexpr int kRankStride = R + 8;                       // bf16 per shared row of B and u
  static constexpr int kTiles = R / 8;                            // n tiles of 8 ranks
  static constexpr size_t kTileBytes = size_t(kTileRows) * kTileStride * sizeof(bf16);
  static constexpr size_t kUBytes = size_t(kTileRows) * kRankStride * sizeof(bf16);
  static constexpr size_t kBBytes = size_t(kCols) * kRankStride * sizeof(bf16);
  static constexpr size_t kSharedBytes = kStages * kTileBytes + 2 * kUBytes + kBBytes;
  static_assert(size_t(kCols) * R * sizeof(float) <= kStages * kTileBytes, "dB's halves are summed in the tile buffers");
};

struct Params {
  const bf16* dpre;    // [m, n_out]
  const bf16* lora_b;  // [n_out, r]
  const bf16* u;       // [m, r]
  long long m;
  int n_out, r;
  int rows_per_block, cols_per_block;  // multiples of 128 and 64
  bf16* v;             // [m, r], written when one block spans every column
  float* v_partial;    // [col_blocks, m, R] otherwise
  float* db_partial;   // [row_blocks, n_out, R]
};

// One subtile's rows of v, from the v accumulators (C fragment: c0, c1 at row g, c2, c3 at row
// g + 8; ranks 2q, 2q + 1): bf16 v when one block spans every column, else an f32 partial.
template <int R>
__device__ __forceinline__ void write_v_rows(const Params& p, const float (&v_acc)[Layout<R>::kTiles][4],
                                             long long first_row, int lane) {
  using L = Layout<R>;
  const int g = lane / 4, q = lane % 4;
  for (int half = 0; half < 2; ++half) {
    const long long row = first_row + g + half * 8;
    if (row >= p.m) continue;
#pragma unroll
    for (int nt = 0; nt < L::kTiles; ++nt) {
      const int rank = nt * 8 + 2 * q;
      const float x = v_acc[nt][2 * half], y = v_acc[nt][2 * half + 1];
      if (p.v != nullptr) {
        if (rank < p.r) *reinterpret_cast<uint32_t*>(p.v + row * p.r + rank) = mma::pack_bf16(x, y);
      } else {
        *reinterpret_cast<float2*>(p.v_partial + (blockIdx.y * p.m + row) * R + rank) = make_float2(x, y);
      }
    }
  }
}

// dB: the upper row half's sums through shared memory (`halves`, the tile buffers, idle now)
// into the lower half's, then out as this row block's partial.
template <int R>
__device__ __forceinline__ void write_db_partial(const Params& p,
                                                 const float (&db_acc)[Layout<R>::kColTiles][Layout<R>::kTiles][4],
                                                 float* halves, int col0, int col_tiles, int db_cols, int warp,
                                                 int lane) {
  using L = Layout<R>;
  mma::wait_copies<0>();
  __syncthreads();
  const int g = lane / 4, q = lane % 4;
  for (int pass = 0; pass < 2; ++pass) {
    if (warp / 4 == 1 - pass) {
#pragma unroll
      for (int ct = 0; ct < L::kColTiles; ++ct)
#pragma unroll
        for (int nt = 0; nt < L::kTiles; ++nt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int col = ct * kTileCols + db_cols + g + half * 8, rank = nt * 8 + 2 * q;
            float2* slot = reinterpret_cast<float2*>(halves + col * R + rank);
            const float x = db_acc[ct][nt][2 * half], y = db_acc[ct][nt][2 * half + 1];
            if (pass == 0) {
              *slot = make_float2(x, y);
            } else {
              const float2 other = *slot;
              const int out_col = col0 + col;
              // Only this block's columns: the tiles it skipped belong to the next block.
              if (ct < col_tiles && out_col < p.n_out)
                *reinterpret_cast<float2*>(p.db_partial + (static_cast<long long>(blockIdx.x) * p.n_out + out_col) * R +
                                           rank) = make_float2(x + other.x, y + other.y);
            }
          }
    }
    __syncthreads();
  }
}

template <int R>
__global__ void __launch_bounds__(kThreads, 1) adapter_grads_kernel(Params p) {
  begin_dependent_kernel();
  using L = Layout<R>;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* tiles = reinterpret_cast<bf16*>(shared);
  bf16* u_tiles = reinterpret_cast<bf16*>(shared + kStages * L::kTileBytes);
  bf16* b_rows = reinterpret_cast<bf16*>(shared + kStages * L::kTileBytes + 2 * L::kUBytes);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const long long row0 = static_cast<long long>(blockIdx.x) * p.rows_per_block;
  const int col0 = blockIdx.y * p.cols_per_block;
  const int subtiles = static_cast<int>((std::min<long long>(p.rows_per_block, p.m - row0) + kTileRows - 1) / kTileRows);
  const int col_tiles = std::min(p.cols_per_block, p.n_out - col0 + kTileCols - 1) / kTileCols;  // ≤ kColTiles
  const int total = subtiles * L::kColTiles;

  // Rows of `ranks` bf16 (a multiple of 8) into shared rows of kRankStride; zeros past `valid`
  // rows and past r ranks.
  auto load_rank_rows = [&](bf16* dst, const bf16* src, long long first, long long valid, int rows) {
    constexpr int chunks = R / 8;
    for (int c = tid; c < rows * chunks; c += kThreads) {
      const int row = c / chunks, rank = (c % chunks) * 8;
      const bool in = first + row < valid && rank < p.r;
      mma::copy_async16(dst + row * L::kRankStride + rank, in ? src + (first + row) * p.r + rank : src, in ? 16 : 0);
    }
  };
  auto load_tile = [&](int t) {
    const int sub = t / L::kColTiles, ct = t % L::kColTiles;
    const long long r0 = row0 + static_cast<long long>(sub) * kTileRows;
    const int c0 = col0 + ct * kTileCols;
    bf16* dst = tiles + (t % kStages) * kTileRows * kTileStride;
    if (ct < col_tiles)
      for (int c = tid; c < kTileRows * kTileCols / 8; c += kThreads) {
        const int row = c / (kTileCols / 8), col = (c % (kTileCols / 8)) * 8;
        const bool in = r0 + row < p.m && c0 + col < p.n_out;
        mma::copy_async16(dst + row * kTileStride + col, in ? p.dpre + (r0 + row) * p.n_out + c0 + col : p.dpre,
                          in ? 16 : 0);
      }
    if (ct == 0) load_rank_rows(u_tiles + (sub % 2) * kTileRows * L::kRankStride, p.u, r0, p.m, kTileRows);
  };

  load_rank_rows(b_rows, p.lora_b, col0, p.n_out, L::kCols);
  load_tile(0);
  mma::commit_copies();
  if (total > 1) load_tile(1);
  mma::commit_copies();

  float v_acc[L::kTiles][4];
  float db_acc[L::kColTiles][L::kTiles][4] = {};
  const int db_cols = (warp % 4) * 16, db_rows = (warp / 4) * 64;  // this warp's share of Tᵀ·u

  for (int sub = 0; sub < subtiles; ++sub) {
    for (auto& tile : v_acc)
      for (float& x : tile) x = 0.0f;
    const bf16* u_tile = u_tiles + (sub % 2) * kTileRows * L::kRankStride;
#pragma unroll
    for (int ct = 0; ct < L::kColTiles; ++ct) {
      const int t = sub * L::kColTiles + ct;
      mma::wait_copies<1>();
      __syncthreads();  // tile t is in; every warp is done with tile t - 1, whose stage t + 2 reuses
      if (t + 2 < total) load_tile(t + 2);
      mma::commit_copies();
      if (ct >= col_tiles) continue;
      const bf16* tile = tiles + (t % kStages) * kTileRows * kTileStride;
      const bf16* b_tile = b_rows + ct * kTileCols * L::kRankStride;
#pragma unroll
      for (int ks = 0; ks < kTileCols / 16; ++ks) {
        // v: rows 16·warp.., k = this tile's columns.
        uint32_t a[4];
        mma::load_matrix_x4(a, tile + (warp * 16 + lane % 16) * kTileStride + ks * 16 + (lane / 16) * 8);
#pragma unroll
        for (int np = 0; np < L::kTiles / 2; ++np) {
          uint32_t b[4];
          mma::load_matrix_x4_trans(
              b, b_tile + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * L::kRankStride + np * 16 + (lane / 16) * 8);
          mma::mma_bf16(v_acc[2 * np], a, b[0], b[1]);
          mma::mma_bf16(v_acc[2 * np + 1], a, b[2], b[3]);
        }
        // dB: columns db_cols.. of the tile as the rows of Tᵀ, k = tile rows db_rows + 16·ks...
        const int k0 = db_rows + ks * 16;
        uint32_t at[4];
        mma::load_matrix_x4_trans(at, tile + (k0 + lane % 8 + (lane / 16) * 8) * kTileStride + db_cols +
                                          ((lane / 8) % 2) * 8);
#pragma unroll
        for (int np = 0; np < L::kTiles / 2; ++np) {
          uint32_t b[4];
          mma::load_matrix_x4_trans(
              b, u_tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * L::kRankStride + np * 16 + (lane / 16) * 8);
          mma::mma_bf16(db_acc[ct][2 * np], at, b[0], b[1]);
          mma::mma_bf16(db_acc[ct][2 * np + 1], at, b[2], b[3]);
        }
      }
    }
    write_v_rows<R>(p, v_acc, row0 + static_cast<long long>(sub) * kTileRows + warp * 16, lane);
  }

  write_db_partial<R>(p, db_acc, reinterpret_cast<float*>(shared), col0, col_tiles, db_cols, warp, lane);
}

// dB = s · Σ over row blocks (in order) of the partials, overwritten or added into `db`; and,
// when the columns were split, v = Σ over column blocks of its partials, as bf16.
template <class Out>
__global__ void finish_kernel(const float* db_partial, int row_blocks, int n_out, int r, int padded, float scale,
                              Out* db, bool accumulate, const float* v_partial, int col_blocks, long long m, bf16* v) {
  begin_dependent_kernel();
  const long long db_count = static_cast<long long>(n_out) * r, v_count = v_partial ? m * r : 0;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < db_count + v_count;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    if (e < db_count) {
      const long long col = e / r, rank = e % r;
      float sum = 0.0f;
      // Unrolled so that several loads are in flight; the sum's order stays the index order.
#pragma unroll 8
      for (int i = 0; i < row_blocks; ++i) sum += db_partial[(i * static_cast<long long>(n_out) + col) * padded + rank];
      const float value = scale * sum + (accumulate ? static_cast<float>(db[e]) : 0.0f);
      db[e] = static_cast<Out>(value);
    } else {
      const long long k = e - db_count, row = k / r, rank = k % r;
      float sum = 0.0f;
      for (int j = 0; j < col_blocks; ++j) sum += v_partial[(j * m + row) * padded + rank];
      v[k] = __float2bfloat16(sum);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int R>
void launch(const Tensor& dpre, const Tensor& lora_b, const Tensor& u, double scale, const Tensor& v,
            const GradOutput& db) {
  using L = Layout<R>;
  const long long m = dpre.size(0);
  const int n_out = static_cast<int>(dpre.size(1)), r = static_cast<int>(lora_b.size(1));
  // Columns split as evenly as kCols allows, then rows so that the grid fills the GPU once.
  const int col_tiles = (n_out + kTileCols - 1) / kTileCols;
  const int col_blocks = (col_tiles + L::kColTiles - 1) / L::kColTiles;
  const int cols_per_block = (col_tiles + col_blocks - 1) / col_blocks * kTileCols;
  const long long row_target = std::max(1, multiprocessor_count() / col_blocks);
  const long long rows_per_block = ((m + row_target - 1) / row_target + kTileRows - 1) / kTileRows * kTileRows;
  const int row_blocks = static_cast<int>((m + rows_per_block - 1) / rows_per_block);

  Tensor db_partial = Tensor::empty({row_blocks, n_out, R}, DType::F32, dpre.device());
  Tensor v_partial = col_blocks > 1 ? Tensor::empty({col_blocks, m, R}, DType::F32, dpre.device()) : Tensor();
  Params p{dpre.data<bf16>(), lora_b.data<bf16>(), u.data<bf16>(), m, n_out, r, static_cast<int>(rows_per_block),
           cols_per_block, col_blocks > 1 ? nullptr : v.data<bf16>(),
           col_blocks > 1 ? v_partial.data<float>() : nullptr, db_partial.data<float>()};
  auto kernel = adapter_grads_kernel<R>;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(L::kSharedBytes)));
  launch_dependent(kernel, dim3(row_blocks, col_blocks), kThreads, L::kSharedBytes, p);
  FT_CUDA_CHECK_LAUNCH("lora adapter_grads_kernel");

  const long long work = static_cast<long long>(n_out) * r + (col_blocks > 1 ? m * r : 0);
  const unsigned blocks = elementwise_blocks(work, 256);
  const float* vp = col_blocks > 1 ? v_partial.data<float>() : nullptr;
  if (db.tensor.dtype() == DType::F32)
    launch_dependent(finish_kernel<float>, blocks, 256, 0, db_partial.data<float>(), row_blocks, n_out, r, R,
                     static_cast<float>(scale), db.tensor.data<float>(), db.accumulate, vp, col_blocks, m,
                     v.data<bf16>());
  else
    launch_dependent(finish_kernel<bf16>, blocks, 256, 0, db_partial.data<float>(), row_blocks, n_out, r, R,
                     static_cast<float>(scale), db.tensor.data<bf16>(), db.accumulate, vp, col_blocks, m,
                     v.data<bf16>());
  FT_CUDA_CHECK_LAUNCH("lora finish_kernel");
}

}  // namespace

bool lora_adapter_grads(const Tensor& dpre, const Tensor& lora_b, const Tensor& u, double scale, const Tensor& v,
                        const GradOutput& db) {
  const int64_t n_out = dpre.size(1), r = lora_b.size(1);
  const DType out = db.tensor.dtype();
  if (dpre.dtype() != DType::BF16 || lora_b.dtype() != DType::BF16 || u.dtype() != DType::BF16 ||
      v.dtype() != DType::BF16 || (out != DType::F32 && out != DType::BF16))
    return false;
  // r up to 32: at r 64 the shared-memory reads of the fragments (each warp reads B's and u's
  // for its own products) outweigh the pass saved, and the two plain products are faster.
  if (r % 8 != 0 || r > 32 || n_out % 8 != 0 || n_out >= (1LL << 30)) return false;
  if (!aligned16(dpre.data_ptr()) || !aligned16(lora_b.data_ptr()) || !aligned16(u.data_ptr()) ||
      !aligned16(v.data_ptr()))
    return false;
  if (r <= 16) launch<16>(dpre, lora_b, u, scale, v, db);
  else launch<32>(dpre, lora_b, u, scale, v, db);
  return true;
}

}  // namespace ft::cuda
