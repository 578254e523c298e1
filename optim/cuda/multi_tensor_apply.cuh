// Multi-tensor apply, in the style of apex's: lists of tensors (DEPTH lists, one entry per
// tensor in each, e.g. grad, param, m, v) are cut into units of kUnitElements (one pass of a
// block: kChunkThreads threads × kGroup elements). What a launch covers travels in the kernel
// arguments (a ChunkTable: each tensor's addresses, size, and where its units start in the
// launch; checked below to fit the 4 KB parameter space that every CUDA version accepts), so
// nothing is uploaded and a launch can be captured in a CUDA graph. A launch is issued whenever
// the table's tensor slots are full, and a tensor never straddles two launches.
//
// A launch runs a fixed grid of kBlocksPerSM blocks per multiprocessor (all resident at once),
// and block b takes the b-th equal share of the launch's units, tensor boundaries or not. apex's
// one 65536-element chunk per block put 320 blocks in a launch on 264 resident slots: each of
// the GPT-2 step's 6 launches ran a second, mostly empty wave, and the SMs that finished early
// idled (84% of the HBM ceiling for AdamW on the H100).
//
// Op contract: __device__ void operator()(const ChunkTable<DEPTH>& table, int tensor,
// int64_t begin, int64_t count, float& thread_sum) const handles elements [begin, begin + count)
// of table tensor `tensor` with the whole block; an op that reduces adds its thread's share to
// thread_sum and declares `float* partials`: the block's sum of them is stored at
// partials[block], `block` numbering the blocks across all launches of one apply
// (block_count() of the list). The split depends only on the list and the multiprocessor
// count, so reductions are deterministic on a given GPU.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

constexpr int kChunkThreads = 512;
constexpr int kBlocksPerSM = 2;  // with __launch_bounds__ below: at most 64 registers a thread
/// Elements a thread handles per access: one 16-byte access of f32, one 8-byte access of bf16.
/// Groups of 8 spilled under the 64-register cap in the bf16-with-master update and were slower
/// on both kinds of parameter (docs/history/performance-log.md, 2026-11-24).
constexpr int kGroup = 4;
constexpr int64_t kUnitElements = static_cast<int64_t>(kChunkThreads) * kGroup;
constexpr int64_t kMaxTensorIds = 65536;  // ids travel as 16-bit values
constexpr int64_t kMaxUnitsPerLaunch = 2147483647LL;  // unit offsets travel as 32-bit values

template <int DEPTH>
struct ChunkTable {
  // As many tensor slots as the parameter budget below allows.
  static constexpr int kMaxTensors = (4096 - 512 - 16) / (8 * DEPTH + 8 + 4 + 2 + 1);
  void* addresses[DEPTH][kMaxTensors];
  int64_t sizes[kMaxTensors];
  int32_t first_unit[kMaxTensors + 1];  // tensor t covers units [first_unit[t], first_unit[t + 1])
  int32_t tensors;
  uint16_t ids[kMaxTensors];   // the tensor's index in the caller's list
  uint8_t flags[kMaxTensors];  // one per-tensor option (AdamW: weight decay on or off)
};

// Kernel parameters may take 4096 bytes; the table leaves 512 for the op and the block base.
constexpr size_t kTableBudget = 4096 - 512;
static_assert(sizeof(ChunkTable<1>) <= kTableBudget && sizeof(ChunkTable<2>) <= kTableBudget &&
                  sizeof(ChunkTable<3>) <= kTableBudget && sizeof(ChunkTable<4>) <= kTableBudget &&
                  sizeof(ChunkTable<5>) <= kTableBudget,
              "a ChunkTable must fit the kernel parameter space");

template <class Op>
concept ReducingOp = requires(Op op) { op.partials; };

template <int DEPTH, class Op>
__global__ void __launch_bounds__(kChunkThreads, kBlocksPerSM)
    multi_tensor_kernel(ChunkTable<DEPTH> table, Op op, int64_t block_base) {
  begin_dependent_kernel();
  const int64_t total = table.first_unit[table.tensors];
  const int64_t u0 = total * blockIdx.x / gridDim.x, u1 = total * (blockIdx.x + 1) / gridDim.x;
  int t = 0;
  while (t + 1 < table.tensors && table.first_unit[t + 1] <= u0) ++t;
  float thread_sum = 0.0f;
  for (int64_t u = u0; u < u1; ++t) {  // one segment per tensor the share touches
    const int64_t end = min(u1, static_cast<int64_t>(table.first_unit[t + 1]));
    const int64_t begin = (u - table.first_unit[t]) * kUnitElements;
    const int64_t count = min((end - u) * kUnitElements, table.sizes[t] - begin);
    if (count > 0) op(table, t, begin, count, thread_sum);
    u = end;
  }
  if constexpr (ReducingOp<Op>) {
    __shared__ float scratch[33];
    const float sum = block_sum(thread_sum, scratch);
    if (threadIdx.x == 0) op.partials[block_base + blockIdx.x] = sum;
  }
}

/// One tensor of the apply: its DEPTH addresses, element count, id and flag.
template <int DEPTH>
struct ChunkedTensor {
  std::array<void*, DEPTH> addresses;
  int64_t size;
  int64_t id;
  uint8_t flag;
};

/// The launches of one apply: [first, last) of the list (empty tensors included, they take no
/// slot), the units they hold, and the grid.
struct LaunchPlan {
  size_t first, last;
  int64_t units;
  unsigned grid;
};

template <int DEPTH>
std::vector<LaunchPlan> plan_launches(const std::vector<ChunkedTensor<DEPTH>>& tensors) {
  std::vector<LaunchPlan> plans;
  const int64_t resident = static_cast<int64_t>(kBlocksPerSM) * multiprocessor_count();
  LaunchPlan open{0, 0, 0, 0};
  int slots = 0;
  auto close = [&](size_t next) {
    open.last = next;
    if (open.units > 0) {
      open.grid = static_cast<unsigned>(std::min(open.units, resident));
      plans.push_back(open);
    }
    open = LaunchPlan{next, next, 0, 0};
    slots = 0;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ChunkedTensor<DEPTH>& t = tensors[i];
    if (t.size == 0) continue;
    FT_CHECK(t.id >= 0 && t.id < kMaxTensorIds, "multi_tensor_apply: tensor id ", t.id, " is outside [0, 65536)");
    const int64_t units = (t.size + kUnitElements - 1) / kUnitElements;
    FT_CHECK(units <= kMaxUnitsPerLaunch, "multi_tensor_apply: tensor ", t.id, " has ", t.size,
             " elements, more than one launch can cover");
    if (slots == ChunkTable<DEPTH>::kMaxTensors || open.units + units > kMaxUnitsPerLaunch) close(i);
    open.units += units;
    ++slots;
  }
  close(tensors.size());
  return plans;
}

/// Blocks over all launches of one apply: the size of a reducing op's partials.
template <int DEPTH>
int64_t block_count(const std::vector<ChunkedTensor<DEPTH>>& tensors) {
  int64_t blocks = 0;
  for (const LaunchPlan& plan : plan_launches(tensors)) blocks += plan.grid;
  return blocks;
}

template <int DEPTH, class Op>
void multi_tensor_apply(const std::vector<ChunkedTensor<DEPTH>>& tensors, const Op& op) {
  int64_t block_base = 0;
  for (const LaunchPlan& plan : plan_launches(tensors)) {
    ChunkTable<DEPTH> table{};
    int slot = 0;
    int64_t unit = 0;
    for (size_t i = plan.first; i < plan.last; ++i) {
      const ChunkedTensor<DEPTH>& t = tensors[i];
      if (t.size == 0) continue;
      for (int d = 0; d < DEPTH; ++d) table.addresses[d][slot] = t.addresses[d];
      table.sizes[slot] = t.size;
      table.ids[slot] = static_cast<uint16_t>(t.id);
      table.flags[slot] = t.flag;
      table.first_unit[slot] = static_cast<int32_t>(unit);
      unit += (t.size + kUnitElements - 1) / kUnitElements;
      ++slot;
    }
    table.first_unit[slot] = static_cast<int32_t>(unit);
    table.tensors = slot;
    launch_dependent(multi_tensor_kernel<DEPTH, Op>, plan.grid, kChunkThreads, 0, table, op, block_base);
    FT_CUDA_CHECK_LAUNCH("multi_tensor_kernel");
    block_base += plan.grid;
  }
}


/// Calls f(i, n) for the groups of kGroup elements of [begin, begin + count) this thread owns,
/// n = kGroup for whole groups and fewer for the tensor's last one. Segments start at multiples
/// of kUnitElements, so groups are aligned whenever the tensor's storage is (fused_supported
/// checks a group's bytes).
template <class F>
__device__ __forceinline__ void for_each_group(int64_t begin, int64_t count, F&& f) {
  for (int64_t k = static_cast<int64_t>(threadIdx.x) * kGroup; k < count; k += static_cast<int64_t>(blockDim.x) * kGroup)
    f(begin + k, count - k < kGroup ? static_cast<int>(count - k) : kGroup);
}

/// Elements per access of a group: a 16-byte access, or the whole group when it is smaller (a
/// group of 4 bf16 is one 8-byte access).
template <class T>
constexpr int kGroupPack = kPackSize<T> < kGroup ? kPackSize<T> : kGroup;
static_assert(kGroup % kGroupPack<float> == 0 && kGroup % kGroupPack<__nv_bfloat16> == 0);

template <class T>
__device__ __forceinline__ void load_group(const T* p, int64_t i, int n, float (&v)[kGroup]) {
  if (n == kGroup) {
    constexpr int kPack = kGroupPack<T>;
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
    constexpr int kPack = kGroupPack<T>;
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
