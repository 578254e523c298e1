// The CUDA side of row_block_ids (row_block.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include "lib/ops/row_block/row_block.h"

namespace ft::cuda {

/// row_block_ids into out.ids and out.weights (allocated by the caller, f32 or bf16 weights);
/// an id outside its table flags kIndexOutOfRange.
void row_block_ids(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin, const Tensor& block_rows,
                   const RowBlockIds& out);

}  // namespace ft::cuda
