// The flash attention forward on Hopper (lib/cuda/attention_hopper.cu), called by
// attention_forward (lib/cuda/attention.cu) when it can run.
#pragma once
#include "lib/ops/attention.h"

namespace ft::cuda {

namespace flash {
struct Params;
}

/// Whether TMA can address these inputs (16-byte aligned base and strides).
bool hopper_forward_takes(const AttentionInputs& in, const AttentionShape& shape);
/// Runs the forward; `params` carries everything but the tensor maps, built here from `in`.
void attention_forward_hopper(const flash::Params& params, const AttentionShape& shape, const AttentionInputs& in);

}  // namespace ft::cuda
