// Primitives over rows picked by ids: the bags of a table-batched embedding bag, sums over
// segments of rows, and in-place row updates. They are the building blocks of the embedding
// bag's composite twin (lib/ops/embedding_bag/embedding_bag.h) and of its row-wise optimizer updates.
//
// Letters: T tables stacked in one [R, D] weight (table t owns rows [row_offsets[t],
// row_offsets[t+1])), S bags, N ids. Bag k belongs to table k % T (bags are sample-major: bag
// b·T + t is sample b's bag of table t) and holds ids [offsets[k], offsets[k+1]).
#pragma once
#include "lib/tensor.h"

namespace ft {

/// The rows and bags of every id: rows[i] = row_offsets[t] + ids[i] (i32 [N]; R < 2^31) and bags[i] = k
/// (i32 [N]) for id i in bag k of table t = k % T. ids: i32/i64 [N]; offsets: i32/i64 [S + 1]
/// (starting at 0, non-decreasing, ending at N); row_offsets: i64 [T + 1] (S a multiple of T).
/// An id outside [0, rows of its table) is an ft::Error (on CUDA, raised at the next
/// synchronizing read; its row reads as 0); so are bad offsets on the CPU. No gradient.
struct BagRows {
  Tensor rows, bags;
};
BagRows bag_rows(const Tensor& ids, const Tensor& offsets, const Tensor& row_offsets);

/// out[k] = Σ x[i] over the ids i of bag k (divided by the bag's size when `mean`; an empty bag
/// gives zeros): x [N, D], offsets [S + 1] and bags [N] as bag_rows gives them; out [S, D].
/// Sums in f32 (f64 for f64), in id order. Its gradient: dx[i] = dout[bags[i]] (/ size).
Tensor segment_sum(const Tensor& x, const Tensor& offsets, const Tensor& bags, bool mean);

/// dst[ids[i]] += src[i] for every i, in place, without history (an optimizer step): dst [R, D],
/// ids [N], src [N, D] of dst's dtype. Ids repeat freely; on CUDA their additions are atomic, so
/// their order (and the rounding) can differ from run to run.
void index_add_rows_(const Tensor& dst, const Tensor& ids, const Tensor& src);
/// dst[ids[i]] = src[i] for every i, in place, without history: where an id repeats, every copy
/// must carry the same values (the rows were gathered and updated together).
void index_put_rows_(const Tensor& dst, const Tensor& ids, const Tensor& src);
}  // namespace ft
