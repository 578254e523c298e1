// The LoRA backward's two products over dY (the pre-activation gradient, dpre [M, OUT]) in one
// pass over it:
//   v  = dpre·B        [M, r]   (feeds dA = s·vᵀ·x, and dx when there is dropout)
//   dB = s·dpreᵀ·u     [OUT, r] (u = drop(x)·Aᵀ, saved by the forward)
// cuBLAS runs them as two skinny products, each a full read of dpre (one 100 MB pass per GPT-2
// c_fc at B·T = 16,384): both are bound by memory, so reading dpre once halves their cost.
//
// How: each block owns a range of rows and a range of OUT columns and streams dpre tiles
// [128 rows × 64 columns] through shared memory (cp.async, three stages). Each tile feeds both
// products on the tensor cores (bf16 mma.sync, f32 sums): v's rows accumulate across the
// block's columns, dB's columns across its rows, so each block leaves partial sums, and a
// second small kernel adds them in a fixed order (deterministic, no atomics) and scales dB.
#pragma once
#include "lib/autograd.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// Computes v (bf16 [M, r], overwritten) and dB (GradOutput: overwritten or added into, f32 or
/// bf16) from dpre (bf16 [M, OUT]), lora_b (bf16 [OUT, r]) and u (bf16 [M, r]), and returns true;
/// returns false, enqueuing nothing, outside what the kernel covers (bf16, r a multiple of 8 up
/// to 32, OUT a multiple of 8, 16-byte aligned rows), where the caller runs the two products.
bool lora_adapter_grads(const Tensor& dpre, const Tensor& lora_b, const Tensor& u, double scale, const Tensor& v,
                        const GradOutput& db);

}  // namespace ft::cuda
