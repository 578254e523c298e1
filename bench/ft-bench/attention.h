// ft-bench ops, attention part: the flash kernels against the twin at the docs/workloads.md shape.
#pragma once
#include "bench/ft-bench/ops.h"

namespace ft::bench {

/// Causal attention, B=16, T=1024, C=768, as HS=64 (12 heads) and HS=128 (6 heads): forward
/// and forward+backward medians in both kernel modes, the backward as their difference, and
/// TFLOP/s counted as docs/workloads.md counts them (4·B·NH·T²·HS/2 forward, 2.5× that backward).
/// Each head size's forward+backward medians go to `report` as "attention HS<n>".
void attention_table(const OpsBenchOptions& options, BenchReport& report);

/// Grouped-query attention at Llama's shapes (Llama-3.2-1B's B 4, T 2048, 32/8 heads of 64; the
/// 8B's 32/8 heads of 128 at B 1, T 4096), fused, forward and forward+backward, with RoPE (the
/// rope kernel on Q and K first) and without: what RoPE costs the attention. Each variant's
/// forward+backward median goes to `report` as "gqa+rope HS<n>".
void grouped_rope_table(const OpsBenchOptions& options, BenchReport& report);

}  // namespace ft::bench
