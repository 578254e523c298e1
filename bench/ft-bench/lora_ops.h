// ft-bench ops, LoRA part: the fused lora_linear against the frozen base linear it wraps and
// against its composite twin (issue 15's op targets).
#pragma once
#include "bench/ft-bench/ops.h"

namespace ft::bench {

/// lora_linear forward + backward (dx, dA, dB) at GPT-2's four projections (rows × 768 → 2304,
/// 768 → 768, 768 → 3072 with GELU, 3072 → 768, each with a bias) and at rows × 4096 → 4096
/// without one, for r = 8, 16, 64 (dropout 0) and r = 16 with dropout 0.1. Each row prints the
/// graph-replay medians of the base linear alone (W and b frozen: forward + dx), the fused op
/// and the twin, and the two ratios the targets are stated in: fused / base and twin / fused.
void lora_table(const OpsBenchOptions& options);

}  // namespace ft::bench
