#include "train/batches.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/shape_ops.h"

namespace ft {

BatchSampler::BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last)
    : size_(dataset_size), batch_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  FT_CHECK(batch_size > 0, "BatchSampler: batch size must be positive, got ", batch_size);
  FT_CHECK(!drop_last || dataset_size >= batch_size, "BatchSampler: batch size ", batch_size,
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

int64_t BatchSampler::batches_per_epoch() const { return drop_last_ ? size_ / batch_ : (size_ + batch_ - 1) / batch_; }

Tensor BatchSampler::batch_ids(int64_t b) const {
  FT_CHECK(b >= 0 && b < batches_per_epoch(), "BatchSampler: batch ", b, " of ", batches_per_epoch());
  const int64_t start = b * batch_, n = std::min(batch_, size_ - start);
  Tensor ids = Tensor::empty({n}, DType::I64);
  std::copy_n(order_.begin() + start, n, ids.data<int64_t>());
  return ids;
}

Tensor take_rows(const Tensor& data, const Tensor& ids, Device device) {
  NoGradGuard no_grad;
  if (data.dim() == 1) return gather_rows(data.reshape({-1, 1}), ids).reshape({ids.numel()}).to(device);
  const int64_t row = data.numel() / data.size(0);
  Shape s = data.shape();
  s[0] = ids.numel();
  return gather_rows(data.reshape({data.size(0), row}), ids).reshape(s).to(device);
}

}  // namespace ft
