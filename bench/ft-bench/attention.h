// ft-bench ops, attention part: the flash kernels against the twin at the docs/workloads.md shape.
#pragma once
#include "bench/ft-bench/ops.h"

namespace ft::bench {

/// Causal attention, B=16, T=1024, C=768, as HS=64 (12 heads) and HS=128 (6 heads): forward
/// and forward+backward medians in both kernel modes, the backward as their difference, and
/// TFLOP/s counted as docs/workloads.md counts them (4·B·NH·T²·HS/2 forward, 2.5× that backward).
/// Each head size's forward+backward medians go to `report` as "attention HS<n>".
void attention_table(const OpsBenchOptions& options, BenchReport& report);

}  // namespace ft::bench
