// The IDX loader on files the test writes (valid, corrupt, truncated), the batch sampler, the
// metrics line and JSON, and the step-time median.
#include <gtest/gtest.h>

#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "lib/error.h"
#include "train/data/batches.h"
#include "train/data/fashion_mnist.h"
#include "train/data/idx.h"
#include "train/loop/metrics.h"
#include "train/loop/step_timer.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload,
                               uint8_t type = 0x08) {
  std::vector<uint8_t> b{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + 11) % 251);
  return v;
}

TEST(Idx, ReadsGzippedAndPlainFiles) {
  TempDir dir;
  const auto payload = pattern(3 * 4 * 5);
  write_gz(dir.file("a.gz"), idx_bytes({3, 4, 5}, payload));
  write_file(dir.file("a.idx"), idx_bytes({3, 4, 5}, payload));
  for (const char* name : {"a.gz", "a.idx"}) {
    IdxArray a = read_idx(dir.file(name));
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(a.data, payload);
  }
}

TEST(Idx, RejectsBadMagicTypeAndSizes) {
  TempDir dir;
  auto bad_magic = idx_bytes({4}, pattern(4));
  bad_magic[0] = 7;
  write_gz(dir.file("magic.gz"), bad_magic);
  EXPECT_THROW(read_idx(dir.file("magic.gz")), Error);
  write_gz(dir.file("type.gz"), idx_bytes({4}, pattern(16), 0x0D));
  EXPECT_THROW(read_idx(dir.file("type.gz")), Error);
  write_gz(dir.file("short.gz"), idx_bytes({10, 2}, pattern(19)));
  try {
    read_idx(dir.file("short.gz"));
    FAIL() << "a payload shorter than the header must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  write_gz(dir.file("long.gz"), idx_bytes({10}, pattern(11)));
  EXPECT_THROW(read_idx(dir.file("long.gz")), Error);
  write_gz(dir.file("header.gz"), {0, 0, 8, 3, 0, 0});
  EXPECT_THROW(read_idx(dir.file("header.gz")), Error);
  EXPECT_THROW(read_idx(dir.file("missing.gz")), Error);
  // Four dims of 2^16 multiply to 2^64, which a 64-bit count wraps to 0, the payload's size
  // (tests/fuzz/idx/regress-dims-product-wraps-to-payload).
  const std::vector<uint8_t> wraps = idx_bytes({65536, 65536, 65536, 65536}, {});
  EXPECT_FT_ERROR(parse_idx(wraps, "wrap.idx"), "its header promises more than 2^64 (truncated)");
  EXPECT_EQ(parse_idx(idx_bytes({65536, 0, 3}, {}), "empty.idx").dims, (std::vector<int64_t>{65536, 0, 3}));
}

TEST(Idx, RejectsACutOrCorruptGzipStream) {
  TempDir dir;
  write_gz(dir.file("ok.gz"), idx_bytes({200, 50}, pattern(10000)));
  std::vector<uint8_t> gz = read_file(dir.file("ok.gz"));
  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  write_file(dir.file("cut.gz"), cut);
  EXPECT_THROW(read_idx(dir.file("cut.gz")), Error);
  std::vector<uint8_t> flipped = gz;
  for (size_t i = 20; i < 60 && i < flipped.size(); ++i) flipped[i] ^= 0x5A;
  write_file(dir.file("flipped.gz"), flipped);
  EXPECT_THROW(read_idx(dir.file("flipped.gz")), Error);
}

TEST(Idx, FashionMnistLoaderChecksCountsAndLabels) {
  TempDir dir;
  const auto pixels = pattern(3 * 28 * 28);
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes({3, 28, 28}, pixels));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({3}, {1, 9, 0}));
  ImageDataset ds = load_fashion_mnist(dir.file(""), "train");
  ASSERT_EQ(ds.images.shape(), (Shape{3, 784}));
  EXPECT_EQ(ds.labels.to_vector(), (std::vector<double>{1, 9, 0}));
  EXPECT_NEAR(ds.images.to_vector()[5], (pixels[5] / 255.0 - 0.2860) / 0.3530, 1e-5);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({2}, {1, 9}));
  EXPECT_THROW(load_fashion_mnist(dir.file(""), "train"), Error);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({3}, {1, 10, 0}));
  EXPECT_THROW(load_fashion_mnist(dir.file(""), "train"), Error);
}

TEST(BatchSampler, ShufflesDeterministicallyAndCoversEveryRowOnce) {
  BatchSampler a(103, 10, 42), b(103, 10, 42), c(103, 10, 43);
  EXPECT_EQ(a.batches_per_epoch(), 10);  // the partial batch of 3 is dropped
  std::set<double> seen;
  for (int64_t i = 0; i < a.batches_per_epoch(); ++i) {
    EXPECT_EQ(a.batch_ids(i).to_vector(), b.batch_ids(i).to_vector());
    for (double id : a.batch_ids(i).to_vector()) seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_NE(a.batch_ids(0).to_vector(), c.batch_ids(0).to_vector());
  const auto epoch0 = a.batch_ids(0).to_vector();
  a.start_epoch(1);
  EXPECT_NE(a.batch_ids(0).to_vector(), epoch0);
  BatchSampler keep(103, 10, 0, false, false);
  EXPECT_EQ(keep.batches_per_epoch(), 11);
  EXPECT_EQ(keep.batch_ids(10).to_vector(), (std::vector<double>{100, 101, 102}));
}

TEST(BatchSampler, TakeRowsGathersRows) {
  Tensor data = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor ids = Tensor::from_vector({3, 0}, {2}, DType::I64);
  EXPECT_EQ(take_rows(data, ids, kCPU).to_vector(), (std::vector<double>{6, 7, 0, 1}));
  Tensor labels = Tensor::from_vector({5, 6, 7, 8}, {4}, DType::I64);
  EXPECT_EQ(take_rows(labels, ids, kCPU).to_vector(), (std::vector<double>{8, 5}));
}

TEST(Metrics, LineAndJsonCarryTheSameFields) {
  TempDir dir;
  StepMetrics m{.step = 12, .total_steps = 147, .loss = 0.51234, .lr = 1e-3, .grad_norm = 1.5, .ms = 3.25,
                .step_ms = 3.125, .items_per_s = 1.26e6, .mfu = 0.4071};
  {
    MetricsLog log("samples", dir.file("m.jsonl"));
    const std::string line = log.format(m);
    for (const char* part : {"12/147", "loss 0.5123", "lr 1.00e-03", "grad norm 1.500", "| 3.25 ms", "gpu 3.12 ms",
                             "1.26M samples/s", "MFU 40.7%"})
      EXPECT_NE(line.find(part), std::string::npos) << line << " lacks " << part;
    log.log(m);
    log.log_eval(12, {{"val loss", 2.5}, {"accuracy", 0.75}});
  }
  std::ifstream in(dir.file("m.jsonl"));
  std::string json, eval;
  std::getline(in, json);
  std::getline(in, eval);
  for (const char* part : {"\"step\": 12", "\"loss\": 0.51234,", "\"grad_norm\": 1.5", "\"ms\": 3.2500",
                           "\"step_ms\": 3.125", "\"samples_per_s\": 1260000.0", "\"mfu\": 0.4071"})
    EXPECT_NE(json.find(part), std::string::npos) << json << " lacks " << part;
  EXPECT_EQ(eval, "{\"step\": 12, \"eval\": {\"accuracy\": 0.75, \"val loss\": 2.5}}");
}

TEST(Metrics, UnknownPeakShowsAQuestionMarkAndEvalLinesListEveryMetric) {
  MetricsLog log("tok", "", "step");
  StepMetrics m{.step = 3, .total_steps = 9, .loss = 1.0, .ms = 2.0, .step_ms = 1.5, .items_per_s = 10};
  std::string line = log.format(m);
  EXPECT_EQ(line.find("MFU"), std::string::npos) << line;  // no FLOPs given: no MFU field at all
  EXPECT_NE(line.find("| step 1.50 ms"), std::string::npos) << line;
  m.mfu_expected = true;
  line = log.format(m);
  EXPECT_NE(line.find("MFU ?"), std::string::npos) << line;
  EXPECT_EQ(log.format_eval(20, {{"val loss", 4.12346}, {"test accuracy", 0.8612}}),
            "step    20 | test accuracy 0.8612 | val loss 4.1235");
}

TEST(StepTimer, MedianAndCpuTiming) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
  StepTimer timer(kCPU);
  for (int i = 0; i < 3; ++i) {
    timer.begin_step();
    volatile double x = 0;
    for (int k = 0; k < 100000; ++k) x = x + k;
    timer.end_step();
  }
  const auto times = timer.collect();
  ASSERT_EQ(times.size(), 3u);
  for (double t : times) EXPECT_GT(t, 0.0);
  EXPECT_TRUE(timer.collect().empty());
}

}  // namespace
}  // namespace ft
