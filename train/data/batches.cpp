#include "train/data/batches.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/parse.h"

namespace ft {

BatchSampler::BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last,
                           BatchShard shard)
    : size_(dataset_size), batch_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last), shard_(shard) {
  FT_CHECK(batch_size > 0, "BatchSampler: batch size must be positive, got ", batch_size);
  FT_CHECK(shard.world >= 1 && shard.rank >= 0 && shard.rank < shard.world, "BatchSampler: rank ", shard.rank,
           " of world size ", shard.world);
  FT_CHECK(!drop_last || dataset_size >= batch_size * shard.world, "BatchSampler: batch size ", batch_size,
           shard.world > 1 ? " times the world size " + std::to_string(shard.world) : std::string(),
           " is larger than the dataset (", dataset_size, " rows)");
  start_epoch(0);
}

void BatchSampler::start_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(size_));
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) {
    std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    std::shuffle(order_.begin(), order_.end(), rng);
  }
}

int64_t BatchSampler::batches_per_epoch() const {
  const int64_t global = batch_ * shard_.world;
  return drop_last_ ? size_ / global : (size_ + global - 1) / global;
}

Tensor BatchSampler::batch_ids(int64_t b) const {
  FT_CHECK(b >= 0 && b < batches_per_epoch(), "BatchSampler: batch ", b, " of ", batches_per_epoch());
  const int64_t start = std::min(size_, (b * shard_.world + shard_.rank) * batch_);
  const int64_t n = std::min(batch_, size_ - start);
  Tensor ids = Tensor::empty({n}, DType::I64);
  std::copy_n(order_.begin() + start, n, ids.data<int64_t>());
  return ids;
}

EpochBatches::EpochBatches(BatchSampler sampler) : sampler_(std::move(sampler)) {}

Tensor EpochBatches::next_ids() {
  if (batch_ == sampler_.batches_per_epoch()) {
    ++epoch_;
    batch_ = 0;
    sampler_.start_epoch(epoch_);
  }
  return sampler_.batch_ids(batch_++);
}

DataPosition EpochBatches::position() const {
  // A finished epoch reads as the start of the next one: the same batches follow.
  if (batch_ == sampler_.batches_per_epoch()) return {{"epoch", std::to_string(epoch_ + 1)}, {"batch", "0"}};
  return {{"epoch", std::to_string(epoch_)}, {"batch", std::to_string(batch_)}};
}

void EpochBatches::set_position(const DataPosition& position, const char* source) {
  const auto epoch = position.find("epoch"), batch = position.find("batch");
  FT_CHECK(epoch != position.end() && batch != position.end(), source, ": a position needs 'epoch' and 'batch'");
  const int64_t e = parse_int64(epoch->second, std::string(source) + ": the saved position's 'epoch'");
  const int64_t b = parse_int64(batch->second, std::string(source) + ": the saved position's 'batch'");
  FT_CHECK(e >= 0 && b >= 0 && b < sampler_.batches_per_epoch(), source, ": no batch ", b, " in epoch ", e, " (",
           sampler_.batches_per_epoch(), " batches an epoch)");
  epoch_ = e;
  batch_ = b;
  sampler_.start_epoch(epoch_);
}

Tensor take_rows(const Tensor& data, const Tensor& ids, Device device) {
  NoGradGuard no_grad;
  if (data.dim() == 1) return gather_rows(data.reshape({-1, 1}), ids).reshape({ids.numel()}).to(device);
  const int64_t row = data.numel() / data.size(0);
  Shape s = data.shape();
  s[0] = ids.numel();
  return gather_rows(data.reshape({data.size(0), row}), ids).reshape(s).to(device);
}

RowBatchSource::RowBatchSource(std::map<std::string, Tensor> columns, BatchSampler sampler)
    : columns_(std::move(columns)), batches_(std::move(sampler)) {
  FT_CHECK(!columns_.empty(), "RowBatchSource: no columns");
  for (const auto& [name, column] : columns_) {
    FT_CHECK(column.device().is_cpu() && column.dim() >= 1, "RowBatchSource: column '", name,
             "' must be a host tensor [N, ...], got ", shape_str(column.shape()), " on ", column.device().str());
    FT_CHECK(column.size(0) == batches_.sampler().dataset_size(), "RowBatchSource: column '", name, "' has ",
             column.size(0), " rows, the sampler ", batches_.sampler().dataset_size());
  }
}

void RowBatchSource::next_into(BatchWriter& out) {
  const Tensor ids = batches_.next_ids();
  const int64_t* id = ids.data<int64_t>();
  const int64_t n = ids.numel();
  for (const auto& [name, column] : columns_) {
    Shape shape = column.shape();
    shape[0] = n;
    const size_t row_bytes = column.nbytes() / static_cast<size_t>(column.size(0));
    char* dst = static_cast<char*>(out.buffer(name, shape, column.dtype()));
    const char* src = static_cast<const char*>(column.data_ptr());
    // A thread per half megabyte, at most half the cores: the training thread keeps the rest.
    const int threads = static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(row_bytes) * n >> 19, 1,
                                                             std::max(1, omp_get_num_procs() / 2)));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(id[i]) * row_bytes, row_bytes);
  }
}

DataPosition RowBatchSource::position() const { return batches_.position(); }

void RowBatchSource::set_position(const DataPosition& position) {
  batches_.set_position(position, "RowBatchSource");
}

}  // namespace ft
