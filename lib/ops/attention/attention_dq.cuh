// The deterministic dQ of the flash attention backwards (attention_backward.cu on mma.sync,
// lib/ops/attention/attention_hopper_backward.cu on wgmma). A block owns a key tile and computes, each
// step, its share of one query tile's dQ (dS·K over its keys). The shares of a query tile are
// added in a fixed order, from the key tile on the diagonal down to key tile 0, through an f32
// buffer and a turn counter per query tile: the first share is stored, each later one waits for
// its turn and adds (the bulk copy engine does the adds). A small kernel then writes dQ in bf16
// from the sums, each chunk of rows as soon as its query tiles' last turns are passed: it starts
// while the backward's last blocks still run (attention_dq_finish_kernel). FlashAttention-2 and
// -3 add the shares with atomics in whatever order blocks arrive; this order makes dQ
// bit-reproducible.
#pragma once
#include <cuda/atomic>

#include "lib/cuda/mma.cuh"
#include "lib/ops/attention/attention_tile.cuh"

namespace ft::cuda::flash {

/// Query rows per step of the mma.sync backward: 64 at HS 64; 32 at HS 128, where the dK and dV
/// accumulators alone take 128 registers a thread.
template <int D>
constexpr int kBackwardQueryRows = D <= 64 ? 64 : 32;
/// Query rows per step of the Hopper backward, at either head size (one tile of row statistics).
constexpr int kHopperBackwardQueryRows = kStatTileRows;
/// Keys a block of the Hopper backward owns (two warpgroups of 64 keys).
constexpr int kHopperBackwardKeys = 128;

/// The warp's tile of a query tile's dQ share (kRows rows × HS): 16 rows × kCols columns, for
/// the 4 warps of a block (the Hopper backward's warpgroups take turns at the shares). mma.sync
/// at HS 64 and Hopper: the 4 row tiles of 64 queries, all columns; mma.sync at HS 128: two row
/// tiles of 32 queries × two column halves.
template <int D, int kRows = kBackwardQueryRows<D>>
struct DqTile {
  static constexpr int kRowTiles = kRows / 16;
  static constexpr int kCols = kRows * D / 64;
  static_assert(kRowTiles * (D / kCols) == 4 && kCols % 64 == 0, "one 16-row tile for each of 4 warps");
  __device__ static int warp() { return threadIdx.x / 32 % 4; }
  __device__ static int row0() { return (warp() % kRowTiles) * 16; }
  __device__ static int col0() { return (warp() / kRowTiles) * kCols; }
};

/// A staged dQ share: the query tile's rows × HS in f32, each row padded by 8 floats so that a
/// half-warp's 8-byte stores of accumulator pairs (4 rows × 4 column pairs) start on banks 8
/// apart and never collide. The sums in global memory keep the same layout.
template <int D>
constexpr int kDqStride = D + 8;
template <int D, int kRows = kBackwardQueryRows<D>>
constexpr int kDqShareFloats = kRows * kDqStride<D>;

/// The warp's accumulators of a dQ share into the block's staging buffer, made visible to the
/// bulk copy engine (the caller's barrier follows).
template <int D, int kRows = kBackwardQueryRows<D>>
__device__ __forceinline__ void stage_dq_share(float* staged, const float (&dq)[DqTile<D, kRows>::kCols / 8][4]) {
  using Tile = DqTile<D, kRows>;
#pragma unroll
  for (int n = 0; n < Tile::kCols / 8; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = Tile::row0() + fragment_row(2 * half), col = Tile::col0() + fragment_col(n, 0);
      *reinterpret_cast<float2*>(staged + row * kDqStride<D> + col) = make_float2(dq[n][2 * half], dq[n][2 * half + 1]);
    }
  mma::fence_shared_for_bulk();
}

// A block whose turn never comes would hang the GPU; after about a second of waiting it traps
// instead (the launch then fails with an error). Blocks wait only on blocks of lower index,
// which the hardware starts first, so a correct launch never gets near this.
constexpr long long kMaxTurnSpins = 1LL << 24;

/// How many shares query tile qt (of `rows` rows) gets: one from each key tile (of `key_tile`
/// keys) from the diagonal's down to key tile 0. The diagonal's share is turn 0, key tile kt's
/// turn is (count - 1 - kt), and once every share is added the counter reads `count`.
__device__ __forceinline__ int dq_share_count(int qt, int rows, int key_tile, int tokens, bool causal) {
  const int key_tiles = (tokens + key_tile - 1) / key_tile;
  return (causal ? min(key_tiles - 1, ((qt + 1) * rows - 1) / key_tile) : key_tiles - 1) + 1;
}

/// Spins until a turn counter reads `turn` (`seen`: its last value read, updated), trapping
/// after kMaxTurnSpins reads.
__device__ __forceinline__ void wait_for_turn(int* turns, int turn, int& seen) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> counter(*turns);
  long long spins = 0;
  while (seen != turn) {
    __nanosleep(32);
    if (++spins > kMaxTurnSpins) __trap();
    seen = counter.load(::cuda::memory_order_relaxed);
  }
}

/// The steps of a backward block: it owns a key tile of one key/value head and streams, one head
/// after the other, the query tiles from `first` of each query head of its group (one head
/// without GQA). Step i takes tile(i) of query head pair(i) (b·NH + h); slot(i) is that query
/// tile's place among the group's dQ shares and turn counters, which start at the group's first
/// head (DqShares).
struct GroupSteps {
  int pair0, first, query_tiles, head_steps, steps;
  __device__ GroupSteps(const Params& p, int first_tile, int tiles)
      : pair0(first_query_pair(p)), first(first_tile), query_tiles(tiles), head_steps(tiles - first_tile),
        steps(p.group * (tiles - first_tile)) {}
  __device__ int pair(int i) const { return pair0 + i / head_steps; }
  __device__ int tile(int i) const { return first + i % head_steps; }
  __device__ int slot(int i) const { return (i / head_steps) * query_tiles + tile(i); }
};

/// One thread's side of the ordered dQ sums of one head: thread 0's in the mma.sync backward; in
/// the Hopper backward each warpgroup's first thread's, for the shares its warpgroup staged. The
/// shares of a query tile come from the key tile on the diagonal (turn 0, a bulk store) down to
/// key tile 0 (bulk adds); each waits for its turn and passes the turn on once its bulk copy is
/// complete. In the mma.sync backward a share staged in step t is issued at the start of step
/// t + 1 and completed at the start of step t + 2: the bulk
/// copies are tracked on the same scoreboard as the cp.async prefetches (the SASS waits on SB0
/// for both), so a copy issued just before a prefetch wait would stall the block on its round
/// trip to L2; a step later it is long done.
struct DqShares {
  float* sums;   // the head's query tiles, kDqShareFloats each
  int* turns;    // the head's query tiles' turn counters
  int in_flight = -1, in_flight_turn = 0;  // the query tile whose turn is still to be passed on
  int seen = -1;  // a turn counter read ahead (peek), so its round trip overlaps the step's waits

  /// Waits for the share in flight (a step old) and passes its turn on.
  __device__ void complete() {
    mma::wait_bulk();  // also frees the staging buffer the copy read
    if (in_flight < 0) return;
    // The copy's adds were made by the bulk copy engine (the async proxy); the finish kernel,
    // which may already run (attention_dq_finish_kernel), reads the sums with ordinary loads once
    // it sees the last turn passed.
    mma::fence_global_with_bulk();
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device>(turns[in_flight])
        .store(in_flight_turn + 1, ::cuda::memory_order_release);
    in_flight = -1;
  }
  /// Starts reading query tile qt's turn counter; issue() uses the value.
  __device__ void peek(int qt) {
    seen = ::cuda::atomic_ref<int, ::cuda::thread_scope_device>(turns[qt]).load(::cuda::memory_order_relaxed);
  }
  /// Adds the share of query tile qt staged in shared memory, in its turn (0 stores; a later
  /// turn waits until the counter, read by peek() and again while it is short, reaches it).
  /// Every share passes its turn on, the last one too: the finish kernel waits for it.
  __device__ void issue(const float* staged, int qt, int turn, int floats) {
    float* sum = sums + static_cast<int64_t>(qt) * floats;
    const unsigned bytes = static_cast<unsigned>(floats) * sizeof(float);
    if (turn == 0) {
      mma::bulk_store(sum, staged, bytes);
    } else {
      wait_for_turn(turns + qt, turn, seen);
      // The previous share's bulk copy was complete before its turn was passed on, and this
      // copy starts only once that turn is seen (a control dependency); the fence orders the
      // read of the counter before the bulk copy engine's access.
      mma::fence_global_with_bulk();
      mma::bulk_add(sum, staged, bytes);
    }
    mma::commit_bulk();
    in_flight = qt, in_flight_turn = turn;
  }
};

}  // namespace ft::cuda::flash
