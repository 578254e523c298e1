#include "layers/embedding_bag.h"

#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"

namespace ft {

EmbeddingBagCollection::EmbeddingBagCollection(Options options, Generator& gen) : options_(std::move(options)) {
  FT_CHECK(!options_.table_rows.empty() && options_.dim > 0, "EmbeddingBagCollection: needs at least one table and D > 0");
  std::vector<Tensor> parts;
  int64_t rows = 0;
  for (int64_t r : options_.table_rows) {
    FT_CHECK(r > 0, "EmbeddingBagCollection: every table needs rows, got ", r);
    const double bound = std::sqrt(1.0 / static_cast<double>(r));
    parts.push_back(affine(Tensor::rand({r, options_.dim}, gen, DType::F32), 2.0 * bound, -bound));
    rows += r;
  }
  FT_CHECK(rows < (int64_t{1} << 31), "EmbeddingBagCollection: ", rows, " rows in all exceed 2^31");
  Tensor weight = Tensor::empty({rows, options_.dim}, DType::F32);
  int64_t at = 0;
  for (const Tensor& t : parts) {
    weight.narrow(0, at, t.size(0)).copy_(t);
    at += t.size(0);
  }
  weight_ = register_parameter("weight", weight, true, /*keep_dtype=*/true);
  if (options_.update == RowUpdateKind::RowWiseAdagrad)
    accumulator_ = register_parameter("accumulator", Tensor::zeros({rows}, DType::F32), false, true);
  std::vector<double> offsets{0};
  for (int64_t r : options_.table_rows) offsets.push_back(offsets.back() + static_cast<double>(r));
  row_offsets_ = Tensor::from_vector(offsets, {tables() + 1}, DType::I64);
}

SparseRowUpdate EmbeddingBagCollection::update() {
  const Device device = weight_.device();
  // Moved with the weight on first use after Module::to (the eager steps before a CUDA graph's
  // capture do that), so a captured step only reads them.
  if (row_offsets_.device() != device) row_offsets_ = row_offsets_.to(device);
  if (!lr_.defined() || lr_.device() != device || lr_.dtype() != weight_.dtype())
    lr_ = Tensor::full({1}, options_.lr, weight_.dtype(), device);
  return SparseRowUpdate{
      .kind = options_.update, .lr = lr_, .accumulator = accumulator_, .eps = options_.eps, .exchange = exchange_};
}

Tensor EmbeddingBagCollection::forward_bags(const Tensor& ids, const Tensor& offsets, const Tensor& per_sample_weights,
                                            DType out_dtype) {
  const SparseRowUpdate u = update();
  return embedding_bag(weight_, row_offsets_, ids, offsets, per_sample_weights,
                       {.mode = options_.mode, .out_dtype = out_dtype, .update = u});
}

Tensor EmbeddingBagCollection::forward_one_hot(const Tensor& ids, DType out_dtype) {
  FT_CHECK(ids.dim() == 2 && ids.size(1) == tables(), "EmbeddingBagCollection: ids must be [B, ", tables(), "], got ",
           shape_str(ids.shape()));
  const int64_t n = ids.numel();
  if (!one_hot_offsets_.defined() || one_hot_offsets_.numel() != n + 1 || one_hot_offsets_.device() != ids.device())
    one_hot_offsets_ = Tensor::arange(n + 1, DType::I32, ids.device());
  return forward_bags(ids.reshape({n}), one_hot_offsets_, Tensor(), out_dtype);
}

}  // namespace ft
