// Multi-tensor apply, in the style of apex's: lists of tensors (DEPTH lists, one entry per
// tensor in each, e.g. grad, param, m, v) are cut into chunks of kChunkElements; each block of
// a launch takes one (tensor, chunk) pair. Which pair a block takes travels in the kernel
// arguments (a ChunkTable, checked below to fit the 4 KB parameter space that every CUDA
// version accepts), so nothing is uploaded and a launch can be captured in a CUDA graph. A
// launch is issued whenever the table's tensor slots or block slots are full.
//
// Op contract: __device__ void operator()(const ChunkTable<DEPTH>& table, int tensor,
// int64_t begin, int64_t count, int64_t block) const handles elements [begin, begin + count)
// of table tensor `tensor`; `block` numbers the block across all launches of one apply
// (partial results are stored by it).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

constexpr int64_t kChunkElements = 65536;
constexpr int kChunkThreads = 512;
// Chunk and tensor numbers travel as 16-bit values.
constexpr int64_t kMaxChunksPerTensor = 65536;
constexpr int64_t kMaxTensorIds = 65536;

template <int DEPTH>
struct ChunkTable {
  // Tensor slots per depth, apex's numbers: they keep every table under the limit below.
  static constexpr int kMaxTensors = DEPTH == 1 ? 110 : DEPTH == 2 ? 64 : DEPTH == 3 ? 48 : DEPTH == 4 ? 36 : 30;
  static constexpr int kMaxBlocks = 320;
  void* addresses[DEPTH][kMaxTensors];
  int64_t sizes[kMaxTensors];
  uint16_t ids[kMaxTensors];    // the tensor's index in the caller's list
  uint8_t flags[kMaxTensors];   // one per-tensor option (AdamW: weight decay on or off)
  uint8_t block_tensor[kMaxBlocks];
  uint16_t block_chunk[kMaxBlocks];
};

// Kernel parameters may take 4096 bytes; the table leaves 512 for the op and the block base.
constexpr size_t kTableBudget = 4096 - 512;
static_assert(sizeof(ChunkTable<1>) <= kTableBudget && sizeof(ChunkTable<2>) <= kTableBudget &&
                  sizeof(ChunkTable<3>) <= kTableBudget && sizeof(ChunkTable<4>) <= kTableBudget &&
                  sizeof(ChunkTable<5>) <= kTableBudget,
              "a ChunkTable must fit the kernel parameter space");

template <int DEPTH, class Op>
__global__ void __launch_bounds__(kChunkThreads) multi_tensor_kernel(ChunkTable<DEPTH> table, Op op, int64_t block_base) {
  const int tensor = table.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(table.block_chunk[blockIdx.x]) * kChunkElements;
  const int64_t rest = table.sizes[tensor] - begin, count = rest < kChunkElements ? rest : kChunkElements;
  op(table, tensor, begin, count, block_base + blockIdx.x);
}

/// One tensor of the apply: its DEPTH addresses, element count, id and flag.
template <int DEPTH>
struct ChunkedTensor {
  std::array<void*, DEPTH> addresses;
  int64_t size;
  int64_t id;
  uint8_t flag;
};

/// Chunks of every tensor, the count that multi_tensor_apply's `block` numbering runs over.
template <int DEPTH>
int64_t chunk_count(const std::vector<ChunkedTensor<DEPTH>>& tensors) {
  int64_t chunks = 0;
  for (const auto& t : tensors) chunks += (t.size + kChunkElements - 1) / kChunkElements;
  return chunks;
}

template <int DEPTH, class Op>
void multi_tensor_apply(const std::vector<ChunkedTensor<DEPTH>>& tensors, const Op& op) {
  using Table = ChunkTable<DEPTH>;
  Table table{};
  int slots = 0, blocks = 0;
  int64_t block_base = 0;
  auto launch = [&] {
    multi_tensor_kernel<DEPTH><<<blocks, kChunkThreads, 0, stream()>>>(table, op, block_base);
    FT_CUDA_CHECK_LAUNCH("multi_tensor_kernel");
    block_base += blocks;
    blocks = 0;
  };
  for (const auto& t : tensors) {
    if (t.size == 0) continue;
    FT_CHECK(t.size <= kMaxChunksPerTensor * kChunkElements, "multi_tensor_apply: tensor ", t.id, " has ", t.size,
             " elements, more than the ", kMaxChunksPerTensor * kChunkElements, " one apply can cut into chunks");
    FT_CHECK(t.id >= 0 && t.id < kMaxTensorIds, "multi_tensor_apply: tensor id ", t.id, " is outside [0, 65536)");
    for (int d = 0; d < DEPTH; ++d) table.addresses[d][slots] = t.addresses[d];
    table.sizes[slots] = t.size;
    table.ids[slots] = static_cast<uint16_t>(t.id);
    table.flags[slots] = t.flag;
    const int64_t chunks = (t.size + kChunkElements - 1) / kChunkElements;
    for (int64_t c = 0; c < chunks; ++c) {
      table.block_tensor[blocks] = static_cast<uint8_t>(slots);
      table.block_chunk[blocks] = static_cast<uint16_t>(c);
      ++blocks;
      const bool blocks_full = blocks == Table::kMaxBlocks, last_chunk = c + 1 == chunks;
      if (blocks_full) {
        launch();
        // The tensor continues into the next launch in slot 0 unless this was its last chunk.
        if (!last_chunk) {
          for (int d = 0; d < DEPTH; ++d) table.addresses[d][0] = t.addresses[d];
          table.sizes[0] = t.size;
          table.ids[0] = static_cast<uint16_t>(t.id);
          table.flags[0] = t.flag;
          slots = 0;
        } else {
          slots = -1;
        }
      }
    }
    ++slots;
    if (slots == Table::kMaxTensors) {
      if (blocks > 0) launch();
      slots = 0;
    }
  }
  if (blocks > 0) launch();
}

/// Elements a thread handles per access: two 16-byte accesses of f32, one of bf16. On the H100
/// (adamw-gpt2, docs/performance.md) groups of 4 or 8 and blocks of 256 or 512 threads all ran
/// at 84–85% of the HBM ceiling (1.366–1.386 ms); 8 and 512 are the configuration tested.
constexpr int kGroup = 8;

/// Calls f(i, n) for the groups of kGroup elements of [begin, begin + count) this thread owns,
/// n = kGroup for whole groups and fewer for the tensor's last one. Chunks start at multiples of
/// kChunkElements, so groups are aligned whenever the tensor's storage is (fused_supported
/// checks 32 bytes).
template <class F>
__device__ __forceinline__ void for_each_group(int64_t begin, int64_t count, F&& f) {
  for (int64_t k = static_cast<int64_t>(threadIdx.x) * kGroup; k < count; k += static_cast<int64_t>(blockDim.x) * kGroup)
    f(begin + k, count - k < kGroup ? static_cast<int>(count - k) : kGroup);
}

template <class T>
__device__ __forceinline__ void load_group(const T* p, int64_t i, int n, float (&v)[kGroup]) {
  if (n == kGroup) {
    constexpr int kPack = kPackSize<T>;  // elements per 16-byte access
#pragma unroll
    for (int h = 0; h < kGroup / kPack; ++h) load_pack<T, kPack>(p + i + h * kPack, *reinterpret_cast<float(*)[kPack]>(v + h * kPack));
  } else {
#pragma unroll
    for (int k = 0; k < kGroup; ++k) v[k] = k < n ? to_acc(p[i + k]) : 0.0f;
  }
}

template <class T>
__device__ __forceinline__ void store_group(T* p, int64_t i, int n, const float (&v)[kGroup]) {
  if (n == kGroup) {
    constexpr int kPack = kPackSize<T>;
#pragma unroll
    for (int h = 0; h < kGroup / kPack; ++h)
      store_pack<T, kPack>(p + i + h * kPack, *reinterpret_cast<const float(*)[kPack]>(v + h * kPack));
  } else {
#pragma unroll
    for (int k = 0; k < kGroup; ++k)
      if (k < n) p[i + k] = from_acc<T>(v[k]);
  }
}

}  // namespace ft::cuda
