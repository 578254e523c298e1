// BatchSampler shards: N ranks with batch B see, together, exactly the batches one process sees
// with batch N·B, epoch after epoch, and never the same row twice in one batch.
#include <gtest/gtest.h>

#include <vector>

#include "lib/error.h"
#include "train/data/batches.h"

namespace ft {
namespace {

std::vector<int64_t> ids_of(const BatchSampler& s, int64_t b) {
  const Tensor t = s.batch_ids(b);
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

TEST(BatchShard, RanksTogetherSeeTheSingleProcessBatches) {
  for (bool drop_last : {true, false}) {
    const int world = 3;
    const int64_t rows = 1000, batch = 32;
    BatchSampler whole(rows, batch * world, 17, true, drop_last);
    std::vector<BatchSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(rows, batch, 17, true, drop_last, BatchShard{r, world});
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      whole.start_epoch(epoch);
      for (auto& s : ranks) s.start_epoch(epoch);
      ASSERT_EQ(ranks[0].batches_per_epoch(), whole.batches_per_epoch());
      for (int64_t b = 0; b < whole.batches_per_epoch(); ++b) {
        std::vector<int64_t> joined;
        for (const auto& s : ranks) {
          const std::vector<int64_t> part = ids_of(s, b);
          joined.insert(joined.end(), part.begin(), part.end());
        }
        EXPECT_EQ(joined, ids_of(whole, b)) << "epoch " << epoch << " batch " << b << " drop_last " << drop_last;
      }
    }
  }
}

TEST(BatchShard, TooFewRowsForTheGlobalBatchIsAnError) {
  EXPECT_THROW(BatchSampler(100, 40, 0, true, true, BatchShard{0, 3}), Error);
  EXPECT_THROW(BatchSampler(100, 10, 0, true, true, BatchShard{3, 3}), Error);
}

}  // namespace
}  // namespace ft
