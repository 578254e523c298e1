// Shape primitives with gradients: reshape, transpose, narrow, cat, and gathering rows.
#pragma once
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// A view with the same elements in a new shape (one dim may be -1).
Tensor reshape(const Tensor& x, const Shape& shape);
/// Swaps the last two dims (a copy).
Tensor transpose(const Tensor& x);
/// Elements [start, start + length) along dim d.
Tensor narrow(const Tensor& x, int64_t d, int64_t start, int64_t length);
/// Joins tensors along dim d; all other dims must match.
Tensor cat(const std::vector<Tensor>& xs, int64_t d);
/// Rows of table [V, C] picked by integer ids [...] (i32 or i64): [..., C]. An id outside
/// [0, V) is an ft::Error (on CUDA, raised at the next synchronizing read). The gradient
/// scatters-adds into the table's rows.
Tensor gather_rows(const Tensor& table, const Tensor& ids);

/// A reordering of n rows and its inverse, made on the host, where `of` checks that the order
/// holds each of 0 .. n-1 once.
struct RowPermutation {
  Tensor order;    ///< i64 [n]: row i of the result is row order[i] of the input
  Tensor inverse;  ///< i64 [n]: inverse[order[i]] = i
  static RowPermutation of(const std::vector<int64_t>& order, Device device);
};
/// x [n, C] with its rows reordered (gather_rows by p.order). Its gradient is the reverse
/// reordering (a gather by p.inverse): no zeroed buffer and no atomic adds, as a permutation
/// sends every row to exactly one place.
Tensor permute_rows(const Tensor& x, const RowPermutation& p);

/// One element of each row of x [..., V] picked by integer ids [...] (i32 or i64): result [...]
/// with x's dtype, out[r] = x[r, ids[r]] (PyTorch's gather along the last dim, one index a row).
/// An id outside [0, V) is an ft::Error (on CUDA, raised at the next synchronizing read). The
/// gradient is zero except at the picked elements.
Tensor gather_last(const Tensor& x, const Tensor& ids);

/// Copies `rows` rows of `row_bytes` between pitched buffers on one device (narrow and cat).
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
               Device device);

}  // namespace ft
