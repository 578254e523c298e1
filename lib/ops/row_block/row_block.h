// row_block_ids: a row-wise sharded table's lookups as the rank holding one block of its rows
// sees them. Row-wise sharding (train/distributed/sharded_tables.h) splits each table's rows
// into one contiguous block per rank; every rank pools the whole global batch over its block,
// and the partial sums are added across ranks. A lookup whose row another rank holds must then
// add nothing here, in forward and in backward: it keeps a valid local row and the weight 0, so
// that embedding_bag's per-sample weights do the masking and no bag changes size. That row is
// id mod the block's rows, not one fixed row: a fixed one would collect every foreign lookup of
// the table (half of them on 2 ranks), and the sparse update adds a row's lookups in one place.
//
// Letters: N samples, T tables (one id per bag: column t of ids looks up table t).
#pragma once
#include "lib/tensor.h"

namespace ft {

struct RowBlockIds {
  Tensor ids;      ///< [N, T], ids' dtype: id - block_begin[t] inside the block, else id mod block_rows[t]
  Tensor weights;  ///< [N·T] in the requested dtype: 1 inside the block, else 0
};

/// ids i32/i64 [N, T] on any device; table_rows, block_begin and block_rows i64 [T] on ids'
/// device (each block inside its table, not empty). An id outside [0, table_rows[t]) is an
/// ft::Error (on CUDA, raised at the next synchronizing read). No gradient: ids are not
/// differentiable.
RowBlockIds row_block_ids(const Tensor& ids, const Tensor& table_rows, const Tensor& block_begin,
                          const Tensor& block_rows, DType weight_dtype);

}  // namespace ft
