// ft-bench ops, SwiGLU part: a Llama MLP's down projection over silu(gate)·up, as swiglu_linear
// runs it (the activation made again in backward, not kept), against swiglu's kernel and the
// product that keep it, and against the composite twin.
#pragma once
#include "bench/ft-bench/ops.h"

namespace ft::bench {

/// Forward + backward (da, db, dW) at Llama-3.2-1B's MLP (rows 8192, H 8192 → 2048) and
/// Llama-3.1-8B's (rows 4096, H 14336 → 4096): graph-replay medians of swiglu_linear fused,
/// swiglu then the product (fused kernels, h kept) and the twin, and the device memory each
/// keeps from forward to backward beside its inputs.
void swiglu_down_table(const OpsBenchOptions& options);

}  // namespace ft::bench
