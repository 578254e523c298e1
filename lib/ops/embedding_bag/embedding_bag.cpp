#include "lib/ops/embedding_bag/embedding_bag.h"

#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding_bag/embedding_bag_cuda.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/ops/sparse_rows/sparse_rows.h"

namespace ft {

namespace {

void check_inputs(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                  const Tensor& per_sample_weights, const EmbeddingBagOptions& options) {
  check_defined(weight, "embedding_bag", "weight");
  check_defined(row_offsets, "embedding_bag", "row_offsets");
  check_defined(ids, "embedding_bag", "ids");
  check_defined(offsets, "embedding_bag", "offsets");
  FT_CHECK(weight.dim() == 2 && is_floating(weight.dtype()),
           "embedding_bag: weight must be a floating [R, D], got ", shape_str(weight.shape()), " ",
           dtype_name(weight.dtype()));
  FT_CHECK(weight.size(0) < (int64_t{1} << 31), "embedding_bag: ", weight.size(0), " rows exceed 2^31");
  FT_CHECK(row_offsets.device() == weight.device() && ids.device() == weight.device() &&
               offsets.device() == weight.device(),
           "embedding_bag: weight, row_offsets, ids and offsets must share a device");
  if (per_sample_weights.defined())
    FT_CHECK(per_sample_weights.dim() == 1 && per_sample_weights.numel() == ids.numel() &&
                 per_sample_weights.dtype() == weight.dtype() && per_sample_weights.device() == weight.device(),
             "embedding_bag: per_sample_weights must be [", ids.numel(), "] ", dtype_name(weight.dtype()), " on ",
             weight.device().str(), ", got ", shape_str(per_sample_weights.shape()), " ",
             dtype_name(per_sample_weights.dtype()));
  if (options.out_dtype)
    FT_CHECK(is_floating(*options.out_dtype), "embedding_bag: out_dtype must be floating, got ",
             dtype_name(*options.out_dtype));
  if (!options.update) return;
  const SparseRowUpdate& u = *options.update;
  FT_CHECK(u.lr.defined() && u.lr.numel() == 1 && u.lr.dtype() == weight.dtype() && u.lr.device() == weight.device(),
           "embedding_bag: the update's lr must be one ", dtype_name(weight.dtype()), " element on ",
           weight.device().str());
  if (u.kind != RowUpdateKind::SGD) {
    const bool row_wise = u.kind == RowUpdateKind::RowWiseAdagrad;
    const Shape shape = row_wise ? Shape{weight.size(0)} : weight.shape();
    FT_CHECK(u.accumulator.defined() && u.accumulator.shape() == shape && u.accumulator.dtype() == weight.dtype() &&
                 u.accumulator.device() == weight.device(),
             "embedding_bag: ", row_wise ? "row-wise" : "element-wise", " Adagrad needs an accumulator ",
             shape_str(shape), " ", dtype_name(weight.dtype()), " on ", weight.device().str());
  }
  FT_CHECK(u.eps > 0.0, "embedding_bag: eps must be positive, got ", u.eps);
}

/// On the CPU, the rows a batch touches, each once: each id's slot among them ([N], the ids'
/// dtype) and their count. Read on the host, which a CPU tensor costs nothing (on CUDA it would
/// be a sync, and no step could be captured).
std::pair<Tensor, int64_t> row_slots(const Tensor& rows) {
  const std::vector<double> ids = rows.to_vector();
  std::unordered_map<int64_t, int64_t> slot_of;
  slot_of.reserve(ids.size());
  std::vector<double> slots(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    slots[i] = static_cast<double>(slot_of.emplace(static_cast<int64_t>(ids[i]), slot_of.size()).first->second);
  return {Tensor::from_vector(slots, {static_cast<int64_t>(ids.size())}, rows.dtype()),
          static_cast<int64_t>(slot_of.size())};
}

/// The update of the twin, from the gradient of the gathered rows, in primitives.
void apply_update_composite(const SparseRowUpdate& u, const Tensor& weight, const Tensor& rows, const Tensor& d_rows) {
  const Tensor step = cast(u.lr, weight.dtype()) * u.lr_scale;  // [1]
  if (u.kind == RowUpdateKind::SGD) {
    index_add_rows_(weight, rows, d_rows * (-1.0 * step));
    return;
  }
  // Exact Adagrad needs each row's whole gradient before its accumulator moves: sum the rows'
  // gradients in a scratch, then every id of a row computes the same new values. On
  // the CPU the scratch holds the touched rows only (work in proportion to the batch, not the
  // table); on CUDA it is table-sized, so that the step stays capturable.
  const int64_t r = weight.size(0), d = weight.size(1);
  Tensor slots = rows;
  int64_t scratch_rows = r;
  if (!weight.is_cuda()) std::tie(slots, scratch_rows) = row_slots(rows);
  Tensor summed = Tensor::zeros({scratch_rows, d}, weight.dtype(), weight.device());
  index_add_rows_(summed, slots, d_rows);
  const Tensor g = gather_rows(summed, slots);  // [N, D]
  // Row-wise: one accumulator a row, the mean of g²; element-wise: one an element.
  const bool row_wise = u.kind == RowUpdateKind::RowWiseAdagrad;
  const Tensor accumulator = row_wise ? u.accumulator.reshape({r, 1}) : u.accumulator;
  const Tensor acc = gather_rows(accumulator, rows) + (row_wise ? mean(g * g, true) : g * g);  // [N, 1] or [N, D]
  index_put_rows_(accumulator, rows, acc);
  const Tensor updated = gather_rows(weight, rows) - g * step / (sqrt(acc) + u.eps);  // [N, D]
  index_put_rows_(weight, rows, updated);
}

}  // namespace

Shape embedding_bag_shape(const Tensor& weight, const Tensor& row_offsets, const Tensor& offsets) {
  const int64_t tables = row_offsets.numel() - 1, bags = offsets.numel() - 1;
  FT_CHECK(tables >= 1 && bags % tables == 0, "embedding_bag: ", bags, " bags for ", tables,
           " tables; the bags must be B·T (sample-major)");
  return {bags / tables, tables, weight.size(1)};
}

Tensor embedding_bag_composite(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                               const Tensor& per_sample_weights, const EmbeddingBagOptions& options) {
  const Shape shape = embedding_bag_shape(weight, row_offsets, offsets);
  const BagRows bags = bag_rows(ids, offsets, row_offsets);
  Tensor rows;
  if (!options.update) {
    rows = gather_rows(weight, bags.rows);
  } else {
    // The rows come from the weight without history; their gradient reaches the update instead.
    rows = gather_rows(weight.detach(), bags.rows);
    if (needs_grad({&weight}))
      rows = record("embedding_bag_update", rows, {weight},
                    [update = *options.update, weight = weight.detach(), ids = bags.rows,
                     offsets = offsets.detach()](const Tensor& g) {
                      Tensor all_ids = ids, all_offsets = offsets, all_grads = g;
                      if (update.exchange) update.exchange(all_ids, all_offsets, all_grads);
                      apply_update_composite(update, weight, all_ids, all_grads);
                      return std::vector<Tensor>{Tensor()};
                    });
  }
  if (per_sample_weights.defined()) rows = rows * per_sample_weights.reshape({ids.numel(), 1});
  Tensor pooled = segment_sum(rows, offsets, bags.bags, options.mode == BagMode::Mean);
  if (options.out_dtype && *options.out_dtype != pooled.dtype()) pooled = cast(pooled, *options.out_dtype);
  return pooled.reshape(shape);
}

Tensor embedding_bag(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                     const Tensor& per_sample_weights, const EmbeddingBagOptions& options) {
  check_inputs(weight, row_offsets, ids, offsets, per_sample_weights, options);
  const DType out_dtype = options.out_dtype.value_or(weight.dtype());
  const bool weight_grad = needs_grad({&weight}), psw_grad = needs_grad({&per_sample_weights});
  // The fused backward is the sparse update; a dense weight gradient, or per-sample weights
  // trained against frozen tables, go through the twin.
  if constexpr (kCudaBuild)
    if (use_fused(weight) && weight.dtype() == DType::F32 && (out_dtype == DType::F32 || out_dtype == DType::BF16) &&
        cuda::embedding_bag_supported(weight.size(1)) && (weight_grad ? options.update.has_value() : !psw_grad) &&
        ids.numel() > 0)
      return cuda::embedding_bag_fused(weight, row_offsets, ids, offsets, per_sample_weights, options);
  return embedding_bag_composite(weight, row_offsets, ids, offsets, per_sample_weights, options);
}

}  // namespace ft
