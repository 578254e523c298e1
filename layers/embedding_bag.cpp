#include "layers/embedding_bag.h"

#include <algorithm>
#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/random/random.h"

namespace ft {

Tensor EmbeddingBagCollection::initial_rows(int64_t rows, int64_t dim, uint64_t seed, uint64_t offset, int64_t begin,
                                            int64_t count, Device device) {
  FT_CHECK(begin >= 0 && count >= 0 && begin + count <= rows, "EmbeddingBagCollection: rows [", begin, ", ",
           begin + count, ") are outside a table of ", rows);
  const double bound = std::sqrt(1.0 / static_cast<double>(rows));
  const Tensor u = philox_uniform({count, dim}, seed, offset + static_cast<uint64_t>(begin * dim), device);
  return affine(u, 2.0 * bound, -bound);
}

Tensor EmbeddingBagCollection::draw_rows(const std::vector<TableRowsToDraw>& pieces, int64_t dim, uint64_t seed,
                                         Device device, int64_t chunk_elements) {
  int64_t total = 0;
  for (const TableRowsToDraw& p : pieces) total += p.count;
  Tensor weight = Tensor::empty({total, dim}, DType::F32, device);
  const int64_t chunk = std::max<int64_t>(1, chunk_elements / dim);
  int64_t at = 0;
  for (const TableRowsToDraw& p : pieces) {
    for (int64_t done = 0; done < p.count; done += chunk) {
      const int64_t n = std::min(chunk, p.count - done);
      weight.narrow(0, at + done, n).copy_(initial_rows(p.rows, dim, seed, p.offset, p.first + done, n, device));
    }
    at += p.count;
  }
  return weight;
}

namespace {

/// The tables' rows in all, each table's and the sum checked.
int64_t checked_rows(const EmbeddingBagCollection::Options& options) {
  FT_CHECK(!options.table_rows.empty() && options.dim > 0, "EmbeddingBagCollection: needs at least one table and D > 0");
  int64_t rows = 0;
  for (int64_t r : options.table_rows) {
    FT_CHECK(r > 0, "EmbeddingBagCollection: every table needs rows, got ", r);
    rows += r;
  }
  FT_CHECK(rows < (int64_t{1} << 31), "EmbeddingBagCollection: ", rows, " rows in all exceed 2^31");
  return rows;
}

/// The tables' stacked f32 weight, each table drawn as initial_rows draws it.
Tensor initial_weight(const EmbeddingBagCollection::Options& options, Generator& gen) {
  (void)checked_rows(options);
  std::vector<TableRowsToDraw> pieces;
  for (int64_t r : options.table_rows)
    pieces.push_back({.rows = r, .first = 0, .count = r, .offset = gen.advance(static_cast<uint64_t>(r * options.dim))});
  return EmbeddingBagCollection::draw_rows(pieces, options.dim, gen.seed(), options.device);
}

}  // namespace

EmbeddingBagCollection::EmbeddingBagCollection(Options options, Generator& gen)
    : EmbeddingBagCollection(options, initial_weight(options, gen)) {}

EmbeddingBagCollection::EmbeddingBagCollection(Options options, Tensor weight) : options_(std::move(options)) {
  const int64_t rows = checked_rows(options_);
  FT_CHECK(weight.dtype() == DType::F32 && weight.shape() == (Shape{rows, options_.dim}),
           "EmbeddingBagCollection: the initial weight must be f32 [", rows, ", ", options_.dim, "], got ",
           dtype_name(weight.dtype()), " ", shape_str(weight.shape()));
  weight_ = register_parameter("weight", weight, true, /*keep_dtype=*/true);
  if (options_.update == RowUpdateKind::RowWiseAdagrad)
    accumulator_ = register_parameter("accumulator", Tensor::zeros({rows}, DType::F32, weight.device()), false, true);
  if (options_.update == RowUpdateKind::ElementwiseAdagrad)
    accumulator_ = register_parameter("accumulator", Tensor::zeros({rows, options_.dim}, DType::F32, weight.device()),
                                      false, true);
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
  Tensor& offsets = one_hot_offsets_[{n, ids.device()}];
  if (!offsets.defined()) offsets = Tensor::arange(n + 1, DType::I32, ids.device());
  return forward_bags(ids.reshape({n}), offsets, Tensor(), out_dtype);
}

}  // namespace ft
