// Tensor-core building blocks for the tiled kernels (sm_80 and later, the bulk copies sm_90):
// asynchronous 16-byte copies into shared memory, bulk copies out of it, ldmatrix fragment
// loads, and the bf16 m16n8k16 mma.sync with f32 accumulators. Thin wrappers over PTX, so the
// kernels read as tile algebra.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16", per lane l, g = l / 4, q = l % 4):
//   A (16x16, row-major): a0 = (g, 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..)
//   B (16x8, "col"):      b0 = (k 2q..2q+1, n g), b1 = (k 2q+8.., n g)
//   C (16x8, f32):        c0, c1 = (g, 2q..2q+1), c2, c3 = (g+8, 2q..2q+1)
// Two neighbouring C tiles of one row block are therefore exactly the A fragment of a 16-wide
// k slice (accumulator_to_a), which is how a softmax'd score tile feeds the next product
// without leaving registers.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace ft::cuda::mma {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Copies 16 bytes global -> shared without registers; src_bytes < 16 zero-fills the rest
/// (0: a row past the end of the tensor reads as zeros).
__device__ __forceinline__ void copy_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most `pending` committed copy groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

/// Hopper's bulk copy engine (sm_90): one thread moves `bytes` (a multiple of 16, both ends
/// 16-byte aligned) from shared to global memory asynchronously, as a plain store or as an f32
/// add done at L2. Shared memory written by ordinary stores needs fence_shared_for_bulk() in
/// each writing thread (and a barrier) first.
__device__ __forceinline__ void bulk_store(float* dst, const float* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(shared_address(src)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_add(float* dst, const float* src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(shared_address(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void commit_bulk() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until the thread's committed bulk copies are complete: their writes are done and
/// visible to it, and their shared-memory sources may be written again.
__device__ __forceinline__ void wait_bulk() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_shared_for_bulk() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Orders the thread's ordinary global accesses and its bulk copies against each other, both
/// ways: a read of a turn counter before later copies; completed copies before a later store
/// that tells another block it may read what they wrote.
__device__ __forceinline__ void fence_global_with_bulk() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/// Four 8x8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
/// The same, each matrix transposed: for a B operand stored k-major ([k][n] row-major).
__device__ __forceinline__ void load_matrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

/// c += a · b for one m16n8k16 tile (bf16 inputs, f32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats as one register of two bf16 (the lower address in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

/// The A fragment of k slice [16s, 16s + 16) from the C tiles 2s and 2s + 1 of the same rows.
__device__ __forceinline__ void accumulator_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

}  // namespace ft::cuda::mma
