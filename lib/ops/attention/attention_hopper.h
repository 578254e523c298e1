// The flash attention kernels on Hopper (lib/ops/attention/attention_hopper.cu,
// lib/ops/attention/attention_hopper_backward.cu), called by attention_forward and attention_backward
// (attention_forward.cu, attention_backward.cu) when they can run.
#pragma once
#include "lib/cuda/tensor_map.h"
#include "lib/ops/attention/attention_cuda.h"

namespace ft::cuda {

namespace flash {
struct Params;
}

/// The tensor map of one head's [T, HS] rows (strides as given), in boxes of `rows` × 64.
TensorMapRequest head_rows_map(const void* base, const AttentionShape& shape, const HeadStrides& strides, int rows);

/// The shape of the key and value tensors: `shape` with its key/value heads as heads.
inline AttentionShape key_value_shape(AttentionShape shape) {
  shape.heads = shape.key_value_heads();
  return shape;
}

/// Whether TMA can address these inputs (16-byte aligned base and strides).
bool hopper_forward_takes(const AttentionInputs& in, const AttentionShape& shape);
/// Runs the forward; `params` carries everything but the tensor maps, built here from `in`.
void attention_forward_hopper(const flash::Params& params, const AttentionShape& shape, const AttentionInputs& in);

/// Whether the Hopper backward takes this head size and TMA can address the inputs and dout.
bool hopper_backward_takes(const AttentionInputs& in, const void* dout, const HeadStrides& out_strides,
                           const AttentionShape& shape);
/// Runs the backward's main kernel; `params` carries the row statistics (row_stats), the dQ
/// shares' buffers and everything else but the tensor maps, built here.
void attention_backward_hopper(const flash::Params& params, const AttentionShape& shape, const AttentionInputs& in,
                               const void* dout, const HeadStrides& out_strides);

}  // namespace ft::cuda
