// Hopper's tensor memory accelerator and the shared-memory barriers it signals (sm_90): one
// thread asks for a whole tile of a tensor (described on the host by a CUtensorMap, see
// tensor_map.h), the copy engine writes it into shared memory (swizzled, rows outside the tensor
// zero-filled) and counts its bytes against an mbarrier; the threads that need the tile wait
// on the barrier's phase. Thin wrappers over PTX.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "lib/cuda/mma.cuh"

namespace ft::cuda::tma {

/// The first 1024-byte-aligned address in a dynamic shared-memory buffer (TMA's 128-byte
/// swizzle is a function of the address bits, and the descriptors assume it starts at each
/// tile). Offsetting the __shared__ array itself, rather than rounding an integer, keeps the
/// compiler aware that the result is shared memory: its loads stay LDS, not generic loads.
__device__ __forceinline__ unsigned char* align_1024(unsigned char* shared) {
  return shared + ((1024 - (mma::shared_address(shared) & 1023)) & 1023);
}

/// A barrier expecting `arrivals` arrivals a phase; one thread initializes it before a
/// __syncthreads (fence_barrier_init orders the init before the copy engine's use).
__device__ __forceinline__ void init_barrier(uint64_t* barrier, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mma::shared_address(barrier)), "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/// Arrives and announces `bytes` more to come from copies signalling this barrier.
__device__ __forceinline__ void arrive_expecting(uint64_t* barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mma::shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

/// Arrives once (a consumer's "done with this stage", for a barrier counting such arrivals).
__device__ __forceinline__ void arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mma::shared_address(barrier)) : "memory");
}

// A phase that never completes would hang the GPU; after about a second of polling the
// waiting thread traps instead (the launch then fails with an error).
constexpr long long kMaxBarrierPolls = 1LL << 26;

/// Waits until the barrier's phase of this parity is complete (phases alternate 0, 1, 0, ...;
/// a fresh barrier counts the phase before the first, parity 1, as complete).
__device__ __forceinline__ void wait(uint64_t* barrier, unsigned parity) {
  const uint32_t address = mma::shared_address(barrier);
  for (long long polls = 0;; ++polls) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
    if (done) return;
    if (polls > kMaxBarrierPolls) __trap();
  }
}

/// Copies the box of a 4-D tensor map at element coordinates (c0 innermost .. c3) into shared
/// memory at `dst`, counting its bytes (the whole box, zero-filled parts included) on `barrier`.
__device__ __forceinline__ void load_4d(void* dst, const CUtensorMap& map, uint64_t* barrier, int c0, int c1, int c2,
                                        int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(mma::shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(mma::shared_address(barrier)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared
/// memory, counted on `barrier`.
__device__ __forceinline__ void load_bulk(void* dst, const void* src, unsigned bytes, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          mma::shared_address(dst)),
      "l"(src), "r"(bytes), "r"(mma::shared_address(barrier))
      : "memory");
}

/// Starts the copy of a 128-byte-swizzled box from shared memory at `src` into a 4-D tensor at
/// element coordinates (c0 innermost .. c3), clipped to the tensor; tracked by bulk groups
/// (commit_stores, wait_stores_read, wait_stores). The box's writes must be made visible to the
/// copy engine first (fence_shared_to_async).
__device__ __forceinline__ void store_4d(const CUtensorMap& map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(mma::shared_address(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void commit_stores() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until the committed stores have read their shared memory (it may be written again).
__device__ __forceinline__ void wait_stores_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
/// Waits until the committed stores are done.
__device__ __forceinline__ void wait_stores() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/// Orders this thread's shared-memory writes before the copy engine's reads of them.
__device__ __forceinline__ void fence_shared_to_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Starts fetching a tensor map (a kernel parameter) into the descriptor cache.
__device__ __forceinline__ void prefetch_map(const CUtensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}

}  // namespace ft::cuda::tma
