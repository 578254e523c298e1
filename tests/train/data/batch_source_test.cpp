// Batches, batch sources and the prefetcher: a missing name is an error naming it; the row and
// token sources yield the rows and tokens their loaders would, and resume from a position; the
// prefetcher delivers batches in order with the position after each, surfaces a source's error
// after the batches read before it, and stops without hanging when destroyed at any point.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <stdexcept>
#include <thread>

#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/data/batch.h"
#include "train/data/batch_source.h"
#include "train/data/batches.h"
#include "train/data/token_shards.h"
#include "train/loop/prefetcher.h"

namespace ft {
namespace {

using namespace ft::test;

// Batch k holds "value" = [k, k, k] (f32) and "noise" = 4 random normals; its position says which
// batch comes next. It throws at batch `fail_at` (an ft::Error, or a std::runtime_error).
class CountingSource : public BatchSource {
 public:
  explicit CountingSource(int64_t fail_at = -1, bool ft_error = true, int sleep_ms = 0)
      : fail_at_(fail_at), ft_error_(ft_error), sleep_ms_(sleep_ms) {}
  Batch next() override {
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (next_ == fail_at_) {
      if (ft_error_) FT_FAIL("shard 7 is corrupt");
      throw std::runtime_error("disk on fire");
    }
    const double k = static_cast<double>(next_++);
    calls_++;
    return {{"value", Tensor::full({3}, k)}, {"noise", Tensor::randn({4}, gen_)}};
  }
  DataPosition position() const override { return {{"next", std::to_string(next_)}}; }
  void set_position(const DataPosition& p) override { next_ = std::stoll(p.at("next")); }
  int64_t calls() const { return calls_; }

 private:
  int64_t next_ = 0, fail_at_;
  bool ft_error_;
  int sleep_ms_;
  std::atomic<int64_t> calls_{0};
  Generator gen_{5};
};

// Runs `work` on a thread and fails the test (instead of hanging it) when it does not finish.
void finishes_within(std::chrono::seconds limit, std::function<void()> work) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([work = std::move(work), done] {
    work();
    done->set_value();
  }).detach();
  ASSERT_EQ(finished.wait_for(limit), std::future_status::ready) << "did not finish: a hang";
}

TEST(Batch, AMissingNameIsAnErrorNamingItAndThePresentOnes) {
  Generator gen = test_generator();
  const Batch batch{{"inputs", Tensor::randn({2, 3}, gen)}, {"targets", Tensor::randn({2}, gen)}};
  EXPECT_EQ(batch.rows(), 2);
  EXPECT_EQ(batch.at("targets").numel(), 2);
  EXPECT_FT_ERROR(batch.at("labels"), "'labels'");
  EXPECT_FT_ERROR(batch.at("labels"), "'inputs', 'targets'");
  EXPECT_FT_ERROR(Batch().at("x"), "nothing");
}

TEST(RowBatchSource, YieldsTheSamplersRowsEpochAfterEpochAndResumes) {
  Generator gen = test_generator();
  const Tensor images = Tensor::randn({10, 3, 2}, gen, DType::F32);
  const Tensor labels = random_ids({10}, 5, DType::I64, kCPU, gen);
  RowBatchSource source({{"images", images}, {"labels", labels}}, BatchSampler(10, 4, 7));
  BatchSampler reference(10, 4, 7);
  ASSERT_EQ(source.batches_per_epoch(), 2);  // the partial batch of 2 is dropped
  std::vector<Batch> seen;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    reference.start_epoch(epoch);
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_EQ(source.position(), (DataPosition{{"epoch", std::to_string(epoch)}, {"batch", std::to_string(b)}}));
      const Batch batch = source.next();
      const Tensor ids = reference.batch_ids(b);
      EXPECT_EQ(batch.at("images").shape(), (Shape{4, 3, 2}));
      EXPECT_EQ(batch.at("images").to_vector(), take_rows(images, ids, kCPU).to_vector());
      EXPECT_EQ(batch.at("labels").to_vector(), take_rows(labels, ids, kCPU).to_vector());
      seen.push_back(batch);
    }
  }
  EXPECT_NE(seen[0].at("labels").to_vector(), seen[2].at("labels").to_vector());  // reshuffled
  // A finished epoch reads as the next one's start; a second source resumes from any position.
  EXPECT_EQ(source.position(), (DataPosition{{"epoch", "3"}, {"batch", "0"}}));
  RowBatchSource resumed({{"images", images}, {"labels", labels}}, BatchSampler(10, 4, 7));
  resumed.set_position({{"epoch", "1"}, {"batch", "1"}});
  EXPECT_EQ(resumed.next().at("images").to_vector(), seen[3].at("images").to_vector());
  EXPECT_FT_ERROR(resumed.set_position({{"epoch", "0"}, {"batch", "2"}}), "batch 2");
}

TEST(TokenBatchSource, NamesItsTensorsAndResumesFromItsPosition) {
  TempDir dir("ft_source");
  std::vector<char> text(300);
  Generator gen = test_generator();
  const std::vector<double> bytes = random_ids({300}, 256, DType::F64, kCPU, gen).to_vector();
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(static_cast<int>(bytes[i]));
  std::ofstream(dir.file("a.txt"), std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
  const TokenLoader::Options options{.batch_size = 2, .seq_len = 8, .vocab_size = 256, .format = TokenFormat::Text};
  TokenLoader loader(dir.file("a.txt"), options), other(dir.file("a.txt"), options);
  TokenBatchSource source(loader), resumed(other);
  source.next();
  const DataPosition after_one = source.position();
  EXPECT_EQ(after_one, (DataPosition{{"epoch", "0"}, {"shard", "0"}, {"offset", "16"}}));
  const Batch second = source.next();
  EXPECT_EQ(second.at("inputs").dtype(), DType::I32);
  EXPECT_EQ(second.at("inputs").shape(), (Shape{2, 8}));
  EXPECT_EQ(second.at("inputs").to_vector()[1], second.at("targets").to_vector()[0]);
  resumed.set_position(after_one);
  EXPECT_EQ(resumed.next().at("targets").to_vector(), second.at("targets").to_vector());
  EXPECT_FT_ERROR(resumed.set_position({{"epoch", "0"}}), "shard");
}

TEST(Prefetcher, DeliversBatchesInOrderWithThePositionAfterEach) {
  CountingSource source;
  source.set_position({{"next", "5"}});
  Prefetcher prefetcher(source, {.depth = 2});
  EXPECT_EQ(prefetcher.position(), (DataPosition{{"next", "5"}}));
  std::vector<double> noise;
  for (int64_t k = 5; k < 25; ++k) {
    const Batch b = prefetcher.next();
    EXPECT_EQ(b.at("value").to_vector(), std::vector<double>(3, static_cast<double>(k)));
    EXPECT_EQ(prefetcher.position(), (DataPosition{{"next", std::to_string(k + 1)}}));
    for (double x : b.at("noise").to_vector()) noise.push_back(x);
    prefetcher.release();
    prefetcher.upload_ahead(1);  // nothing on the CPU
  }
  // The batches are the source's own: the same random draws as reading it directly.
  CountingSource direct;
  std::vector<double> expected;
  for (int64_t k = 0; k < 20; ++k)
    for (double x : direct.next().at("noise").to_vector()) expected.push_back(x);
  EXPECT_EQ(noise, expected);
  // It reads ahead, but no further than its depth (two ready, one being written).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(source.calls(), 20 + 3);
}

TEST(Prefetcher, TheSourcesErrorSurfacesAfterTheBatchesReadBeforeIt) {
  for (const bool ft_error : {true, false}) {
    SCOPED_TRACE(ft_error ? "ft::Error" : "std::runtime_error");
    finishes_within(std::chrono::seconds(20), [ft_error] {
      CountingSource source(/*fail_at=*/4, ft_error);
      Prefetcher prefetcher(source, {.depth = 3});
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(prefetcher.next().at("value").to_vector()[0], static_cast<double>(k));
      const char* word = ft_error ? "shard 7 is corrupt" : "disk on fire";
      EXPECT_FT_ERROR(prefetcher.next(), word);  // and again: the error stays
    });
  }
}

TEST(Prefetcher, StopsWithoutHangingWhenDestroyedEarly) {
  finishes_within(std::chrono::seconds(20), [] {
    CountingSource source;
    { Prefetcher untouched(source, {.depth = 2}); }  // the loader may be anywhere
    {
      Prefetcher full(source, {.depth = 2});
      full.next();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the loader waits for a free slot
    }
    CountingSource slow(-1, true, /*sleep_ms=*/30);
    { Prefetcher in_source_call(slow, {.depth = 2}); }  // the loader is inside the source
  });
}

TEST(Prefetcher, UploadsBatchesToTheGpuInOrder) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  CountingSource source;
  Prefetcher prefetcher(source, {.device = kCUDA, .depth = 3, .device_slots = 4});
  CountingSource direct;
  for (int64_t step = 0; step < 12; ++step) {
    // Two micro-batches a step: both in use together, the next two uploaded beside them.
    const Batch a = prefetcher.next(), b = prefetcher.next();
    EXPECT_TRUE(a.at("value").is_cuda());
    EXPECT_EQ(a.at("value").to_vector(), std::vector<double>(3, 2.0 * static_cast<double>(step)));
    EXPECT_EQ(b.at("value").to_vector(), std::vector<double>(3, 2.0 * static_cast<double>(step) + 1));
    EXPECT_EQ(a.at("noise").to_vector(), direct.next().at("noise").to_vector());
    EXPECT_EQ(b.at("noise").to_vector(), direct.next().at("noise").to_vector());
    EXPECT_EQ(prefetcher.position(), (DataPosition{{"next", std::to_string(2 * step + 2)}}));
    prefetcher.release();
    prefetcher.upload_ahead(2);
  }
  EXPECT_FT_ERROR(prefetcher.upload_ahead(5), "device slots");
}

}  // namespace
}  // namespace ft
