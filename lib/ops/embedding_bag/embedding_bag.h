// embedding_bag: the pooled embeddings of a recommender's categorical features, every table in
// one call (table-batched, as FBGEMM's), with the tables' optimizer update fused into backward.
//
// Letters: T tables of D columns stacked in one weight [R, D] (table t owns rows
// [row_offsets[t], row_offsets[t+1])); B samples; S = B·T bags, sample-major (bag b·T + t is
// sample b's bag of table t); N ids. Bag k holds ids [offsets[k], offsets[k+1]), each local to
// its table. out[b, t] = Σ w_i · weight[row_offsets[t] + ids[i]] over bag b·T + t (w_i the
// per-sample weight, 1 without), divided by the bag's size in Mean mode (an empty bag gives
// zeros). out is [B, T, D] in options.out_dtype (the weight's dtype by default).
//
// Sparse tables train without a dense gradient: with options.update the backward applies the
// update to the rows the batch reached (row-wise SGD; exact row-wise Adagrad: one accumulator
// per row, acc += mean(g²), w -= lr·g / (√acc + eps); or exact element-wise Adagrad: one
// accumulator per element, acc += g², w -= lr·g / (√acc + eps); g the row's summed gradient)
// and gives the weight no gradient at all. Without an update the weight gets the dense [R, D]
// gradient (for tests and small tables). Per-sample weights get their gradient either way.
//
// Fused (CUDA, f32 weight, f32 or bf16 out, D ≤ 512): the forward is one kernel, a warp per
// bag summing its rows in f32. The backward with an update sorts (row, position) pairs (CUB
// radix sort) and sums each row's gradient in f32 in sorted order: a warp per chunk of 8
// sorted positions updates the rows whose ids all lie in its chunk, and writes partial sums
// for rows that cross a chunk boundary, which a second kernel adds in chunk order before
// updating. Two runs therefore give bit-identical tables, and a row that half the batch hits
// (a missing value hashed to row 0) is summed by many warps, not one. Bytes: the rows once
// each way, the upstream gradient once, the ids and their sort.
// Twin: bag_rows, gather_rows, mul, segment_sum and cast primitives; its update is a primitive
// row scatter-add (SGD; atomic, so the summation order varies) or, for Adagrad, a dense f32
// [R, D] scratch of summed row gradients and row gathers and puts (lib/ops/sparse_rows/sparse_rows.h).
#pragma once
#include <functional>
#include <optional>

#include "lib/tensor.h"

namespace ft {

enum class BagMode : uint8_t { Sum, Mean };
enum class RowUpdateKind : uint8_t { SGD, RowWiseAdagrad, ElementwiseAdagrad };

/// The optimizer step an embedding bag's backward applies to the rows it reached.
struct SparseRowUpdate {
  RowUpdateKind kind = RowUpdateKind::SGD;
  /// One element on the weight's device, in the weight's dtype (f32 on CUDA), read when the
  /// backward runs: a replayed CUDA graph uses the value current at its launch.
  Tensor lr = {};
  double lr_scale = 1.0;  ///< the step's rate is lr_scale · lr
  /// RowWiseAdagrad: [R]; ElementwiseAdagrad: [R, D]; the weight's dtype and device, updated in
  /// place (zeros to start).
  Tensor accumulator = {};
  double eps = 1e-8;
  /// Data parallelism: replaces this rank's bag ids [N], offsets [S + 1] and the gradient of its
  /// bags [S, D] (per id [N, D] in the twin, which updates per id) by every
  /// rank's, in rank order and scaled to the mean over the ranks, so that every replica applies
  /// the update one process with the whole global batch would. Unset: this rank's alone.
  std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange = {};
};

struct EmbeddingBagOptions {
  BagMode mode = BagMode::Sum;
  std::optional<DType> out_dtype = {};
  std::optional<SparseRowUpdate> update = {};
};

/// weight [R, D] (f32, f64 or bf16); row_offsets i64 [T + 1] on its device (0 = row_offsets[0] <
/// ... = R, every table non-empty); ids i32/i64 [N]; offsets i32/i64 [S + 1] (S a multiple of
/// T); per_sample_weights [N] of the weight's dtype, or undefined. An id outside its table is
/// an ft::Error (on CUDA, raised at the next synchronizing read).
Tensor embedding_bag(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                     const Tensor& per_sample_weights, const EmbeddingBagOptions& options);
/// The result's shape, [B, T, D], for offsets of B·T bags (sample-major) over T tables.
Shape embedding_bag_shape(const Tensor& weight, const Tensor& row_offsets, const Tensor& offsets);
Tensor embedding_bag_composite(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                               const Tensor& per_sample_weights, const EmbeddingBagOptions& options);
}  // namespace ft
