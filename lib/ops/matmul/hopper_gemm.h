// Our own Hopper product (sm_90a, wgmma and TMA), the ground for products with their neighbours'
// work folded in (RoPE, norms, bias and activation, the residual add), which cuBLASLt's epilogues
// cannot do (issues 50 and 52). The first such epilogue: RoPE on a query or key projection. Not dispatched yet: ft-bench ops --only gemm measures it against
// cuBLASLt at the Llama and GPT-2 shapes, and its test checks it against the f64 product.
//
// C = A·Bᵀ: A [M, K], B [N, K], C [M, N], all bf16 row-major (a linear layer's forward, x·Wᵀ),
// f32 sums, one rounding.
#pragma once
#include <optional>

#include "lib/ops/rope/rope.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// Whether the device and the operands allow it: sm_90, bf16, K and N multiples of 8 (TMA's
/// 16-byte row pitch, for A and B read and C written), 16-byte aligned bases.
bool hopper_gemm_supported(const Tensor& a, const Tensor& b);
/// The RoPE epilogue, for a query or key projection: out's rows are B·T tokens (row r at token
/// r % tokens) and its columns heads of head_size (64 or 128); each head is turned as
/// rope(out, config) turns it (rope.h), but on the f32 sums, before their one rounding.
struct GemmRope {
  int64_t tokens = 0, head_size = 0;
  RopeConfig config;
};
/// out [M, N] = a [M, K] · b [N, K]ᵀ on the compute stream, turned by `rope` when given (M a
/// multiple of tokens, N of head_size).
void hopper_gemm(const Tensor& a, const Tensor& b, const Tensor& out, const std::optional<GemmRope>& rope = {});

}  // namespace ft::cuda
