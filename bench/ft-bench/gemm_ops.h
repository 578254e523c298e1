// ft-bench ops, product part: our own Hopper product (lib/ops/matmul/hopper_gemm.h) against
// cuBLASLt's at the products of a Llama-3.2-1B step and of gpt2-124M's.
#pragma once
#include "bench/ft-bench/ops.h"

namespace ft::bench {

/// C = A·Bᵀ in bf16 (a linear layer's forward) at each shape: graph-replay medians of cuBLASLt
/// (the matmul primitive, heuristic algorithm) and of hopper_gemm, their TFLOP/s, and the
/// largest difference between the two results relative to the largest |C|; then the Llama
/// query and key projections with RoPE: cuBLASLt and the rope kernel against the RoPE epilogue.
/// Skipped off sm_90.
void gemm_table(const OpsBenchOptions& options);

}  // namespace ft::bench
