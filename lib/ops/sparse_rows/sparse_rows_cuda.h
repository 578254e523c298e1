// The CUDA launchers of the sparse-row primitives (sparse_rows.cu), which the fused embedding bag
// shares. Compiled only in a CUDA build; callers reach it under
// `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/ops/sparse_rows/sparse_rows.h"
#include "lib/tensor.h"

namespace ft::cuda {

void bag_rows(const Tensor& ids, const Tensor& offsets, const Tensor& row_offsets, const Tensor& rows,
              const Tensor& bags);
void segment_sum(const Tensor& x, const Tensor& offsets, bool mean, const Tensor& out);
/// dx[i] = grad[bags[i]] (divided by the bag's size when mean): segment_sum's backward.
void segment_spread(const Tensor& grad, const Tensor& offsets, const Tensor& bags, bool mean, const Tensor& dx);
void index_put_rows(const Tensor& dst, const Tensor& ids, const Tensor& src);

}  // namespace ft::cuda
