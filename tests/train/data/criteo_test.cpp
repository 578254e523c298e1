// The Criteo pipeline on files the tests write: the TSV parser against a reference built from
// the same random fields, its errors, the binary cache (reuse, staleness, corruption), dlrm's
// split, the batch source, the exact AUC and the synthetic generator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/data/criteo.h"
#include "train/data/criteo_synthetic.h"
#include "train/data/file_list.h"
#include "train/loop/binary_metrics.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

using test::error_mentions;
using test::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A TSV line from its 40 field texts (no line end).
std::string join(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "\t" : "") + fields[i];
  return line;
}

// Field texts of a random valid row, and the values the parser must make of them.
struct RandomRows {
  std::vector<std::vector<std::string>> fields;
  CriteoColumns expected;

  RandomRows(int64_t n, std::mt19937_64& rng) {
    auto pick = [&](int k) { return static_cast<int>(rng() % static_cast<uint64_t>(k)); };
    for (int64_t r = 0; r < n; ++r) {
      std::vector<std::string> f;
      const int label = pick(2);
      f.push_back(std::to_string(label));
      expected.labels.push_back(static_cast<uint8_t>(label));
      for (int j = 0; j < kCriteoDense; ++j) {
        int64_t x = 0;
        switch (pick(6)) {
          case 0: f.push_back(""); break;  // missing
          case 1: x = -1 - pick(1000); break;
          case 2: x = static_cast<int64_t>(rng() >> 1); break;  // up to 2^63 - 1
          case 3: x = pick(5000); f.push_back("00" + std::to_string(x)); break;  // leading zeros
          default: x = pick(100); break;
        }
        if (f.size() == static_cast<size_t>(1 + j)) f.push_back(std::to_string(x));
        expected.dense.push_back(x > 0 ? std::log(static_cast<float>(x) + 1.0f) : 0.0f);
      }
      for (int t = 0; t < kCriteoSparse; ++t) {
        const auto v = static_cast<uint32_t>(rng());
        const int digits = 1 + pick(8);
        const uint32_t value = digits == 8 ? v : v & ((1u << (4 * digits)) - 1);
        char text[16];
        std::snprintf(text, sizeof text, pick(2) ? "%0*x" : "%0*X", digits, value);
        const bool missing = pick(8) == 0;
        f.push_back(missing ? "" : text);
        expected.sparse.push_back(missing ? 0 : value);
      }
      fields.push_back(std::move(f));
    }
  }

  // The rows as a TSV, each line ending in LF or CRLF at random, the last one in nothing.
  std::string tsv(std::mt19937_64& rng) const {
    std::string text;
    for (size_t r = 0; r < fields.size(); ++r)
      text += join(fields[r]) + (r + 1 == fields.size() ? "" : rng() % 2 ? "\r\n" : "\n");
    return text;
  }
};

void expect_rows(const CriteoDataset& ds, const CriteoColumns& expected) {
  ASSERT_EQ(ds.rows(), expected.rows());
  for (int64_t i = 0; i < ds.rows(); ++i) {
    ASSERT_EQ(ds.label(i), expected.labels[i]) << "row " << i;
    for (int j = 0; j < kCriteoDense; ++j)
      ASSERT_EQ(ds.dense(i)[j], expected.dense[i * kCriteoDense + j]) << "row " << i << " I" << j + 1;
    for (int t = 0; t < kCriteoSparse; ++t)
      ASSERT_EQ(ds.sparse(i)[t], expected.sparse[i * kCriteoSparse + t]) << "row " << i << " C" << t + 1;
  }
}

TEST(CriteoParse, ReadsRandomFieldsWithEitherLineEnd) {
  TempDir dir;
  std::mt19937_64 rng(test::test_seed());
  const RandomRows rows(300, rng);
  write_text(dir.file("day.tsv"), rows.tsv(rng));
  CriteoColumns parsed = parse_criteo_tsv(dir.file("day.tsv"));
  EXPECT_EQ(parsed.bad_lines, 0);
  expect_rows(CriteoDataset::from_columns(std::move(parsed)), rows.expected);
  // The edges of int64 are integers; a trailing newline after the last line is fine too.
  std::vector<std::string> f = rows.fields[0];
  f[1] = "-9223372036854775808";
  f[2] = "9223372036854775807";
  write_text(dir.file("edges.tsv"), join(f) + "\n");
  const CriteoColumns edges = parse_criteo_tsv(dir.file("edges.tsv"));
  ASSERT_EQ(edges.rows(), 1);
  EXPECT_EQ(edges.dense[0], 0.0f);
  EXPECT_EQ(edges.dense[1], std::log(9223372036854775807.0f + 1.0f));
}

TEST(CriteoParse, ErrorsNameTheFileTheLineAndTheFault) {
  TempDir dir;
  std::mt19937_64 rng(test::test_seed());
  const RandomRows rows(3, rng);
  auto expect_error = [&](std::vector<std::string> bad, const std::string& fault) {
    const std::string path = dir.file("bad.tsv");
    write_text(path, join(rows.fields[0]) + "\n" + join(rows.fields[1]) + "\r\n" + join(bad) + "\n");
    for (const std::string& word : {path, std::string("line 3:"), fault})
      EXPECT_TRUE(error_mentions([&] { parse_criteo_tsv(path); }, word)) << fault;
  };
  auto with = [&](int field, const std::string& text) {
    std::vector<std::string> f = rows.fields[2];
    f[static_cast<size_t>(field)] = text;
    return f;
  };
  std::vector<std::string> short_line = rows.fields[2], long_line = rows.fields[2];
  short_line.pop_back();
  long_line.push_back("");
  expect_error(short_line, "found 39");
  expect_error(long_line, "found 41");
  expect_error({""}, "found 1");
  expect_error(with(0, "2"), "the label '2' is not 0 or 1");
  expect_error(with(0, ""), "not 0 or 1");
  expect_error(with(4, "12a"), "I4 '12a' is not a decimal integer");
  expect_error(with(1, "-"), "I1 '-' is not a decimal integer");
  expect_error(with(2, "+5"), "not a decimal integer");
  expect_error(with(13, "9223372036854775808"), "I13 '9223372036854775808' does not fit in int64");
  expect_error(with(3, "-9223372036854775809"), "does not fit in int64");
  expect_error(with(14, "zz"), "C1 'zz' is not hexadecimal");
  expect_error(with(39, "12 "), "C26 '12 ' is not hexadecimal");
  expect_error(with(20, "123456789"), "C7 '123456789' has more than 8 hex digits");
}

TEST(CriteoParse, SkipBadLinesCountsThem) {
  TempDir dir;
  std::mt19937_64 rng(test::test_seed());
  const RandomRows rows(6, rng);
  std::vector<std::string> bad = rows.fields[0];
  bad[5] = "x";
  std::string text;
  for (size_t r = 0; r < rows.fields.size(); ++r)
    text += (r % 2 ? join(bad) + "\n\n" : "") + join(rows.fields[r]) + "\n";
  write_text(dir.file("mixed.tsv"), text + join(bad));
  EXPECT_FT_ERROR(parse_criteo_tsv(dir.file("mixed.tsv")), "line 2:");
  CriteoColumns parsed = parse_criteo_tsv(dir.file("mixed.tsv"), true);
  EXPECT_EQ(parsed.bad_lines, 7);  // three bad lines, three empty ones and the last
  expect_rows(CriteoDataset::from_columns(std::move(parsed)), rows.expected);
  write_text(dir.file("all_bad.tsv"), join(bad) + "\n");
  EXPECT_FT_ERROR(parse_criteo_tsv(dir.file("all_bad.tsv"), true), "no valid line");
}

TEST(CriteoParse, EmptyAndMissingFilesAreErrors) {
  TempDir dir;
  write_text(dir.file("empty.tsv"), "");
  EXPECT_FT_ERROR(parse_criteo_tsv(dir.file("empty.tsv")), "empty.tsv' is empty");
  EXPECT_FT_ERROR(parse_criteo_tsv(dir.file("missing.tsv")), "missing.tsv");
  EXPECT_FT_ERROR(CriteoDataset::open(dir.file("missing.tsv")), "cannot open");
  EXPECT_FT_ERROR(CriteoDataset::open(dir.file("empty.tsv")), "empty.tsv' is empty");
}

// A TSV of random rows in a temporary folder, and the values it holds.
struct TsvFixture {
  TempDir dir;
  std::mt19937_64 rng{test::test_seed()};
  RandomRows rows{200, rng};
  std::string path = dir.file("train.txt");
  TsvFixture() { write_text(path, rows.tsv(rng)); }
};

TEST(CriteoDataset, SecondOpenMapsTheCache) {
  TsvFixture f;
  const CriteoDataset first = CriteoDataset::open(f.path);
  EXPECT_FALSE(first.cache_reused());
  EXPECT_EQ(first.cache_path(), f.path + ".ftcache");
  EXPECT_TRUE(fs::exists(f.path + ".ftcache"));
  expect_rows(first, f.rows.expected);
  const CriteoDataset second = CriteoDataset::open(f.path);
  EXPECT_TRUE(second.cache_reused());
  expect_rows(second, f.rows.expected);
  // A cache folder holds the cache instead; switching the cache off reads the TSV alone.
  const CriteoOpenOptions elsewhere{.cache_dir = f.dir.file("caches/criteo")};
  EXPECT_FALSE(CriteoDataset::open(f.path, elsewhere).cache_reused());
  EXPECT_TRUE(fs::exists(f.dir.file("caches/criteo/train.txt.ftcache")));
  EXPECT_TRUE(CriteoDataset::open(f.path, elsewhere).cache_reused());
  const CriteoDataset uncached = CriteoDataset::open(f.path, {.cache = false});
  EXPECT_FALSE(uncached.cache_reused());
  EXPECT_TRUE(uncached.cache_path().empty());
  expect_rows(uncached, f.rows.expected);
}

// The cache is built piece by piece: pieces of a few hundred bytes (a line or two each, the
// last line without its end, CRLF among them) give the rows the whole-file parse gives, bad lines
// in any piece are counted, and an error names the line's number in the whole file.
TEST(CriteoDataset, CacheBuiltInSmallPiecesHoldsTheSameRows) {
  TsvFixture f;
  for (int64_t piece : {int64_t{1}, int64_t{300}, int64_t{4096}}) {
    SCOPED_TRACE("pieces of " + std::to_string(piece) + " bytes");
    const CriteoDataset ds = CriteoDataset::open(f.path, {.cache_dir = f.dir.file("p" + std::to_string(piece)),
                                                          .piece_bytes = piece});
    EXPECT_FALSE(ds.cache_reused());
    expect_rows(ds, f.rows.expected);
  }
  std::vector<std::string> bad = f.rows.fields[0];
  bad[3] = "x";
  std::string text;
  for (size_t r = 0; r < 40; ++r) text += join(f.rows.fields[r]) + "\n" + (r % 7 == 3 ? join(bad) + "\n" : "");
  write_text(f.dir.file("bad.tsv"), text);
  const CriteoDataset skipped =
      CriteoDataset::open(f.dir.file("bad.tsv"), {.skip_bad_lines = true, .piece_bytes = 500});
  EXPECT_EQ(skipped.rows(), 40);
  EXPECT_EQ(skipped.bad_lines(), 6);  // after rows 3, 10, 17, 24, 31, 38
  EXPECT_FT_ERROR(CriteoDataset::open(f.dir.file("bad.tsv"), {.cache_dir = f.dir.file("strict"), .piece_bytes = 500}),
                  "line 5:");
}

TEST(CriteoRows, SeveralDatasetsReadAsOne) {
  std::mt19937_64 rng(test::test_seed());
  const RandomRows a(5, rng), b(1, rng), c(7, rng);
  const CriteoRows rows({CriteoDataset::from_columns(a.expected), CriteoDataset::from_columns(b.expected),
                         CriteoDataset::from_columns(c.expected)});
  ASSERT_EQ(rows.rows(), 13);
  EXPECT_EQ(rows.starts(), (std::vector<int64_t>{0, 5, 6, 13}));
  const auto expect_row = [&](int64_t i, const CriteoColumns& part, int64_t j) {
    EXPECT_EQ(rows.label(i), part.labels[j]) << i;
    EXPECT_EQ(rows.dense(i)[12], part.dense[j * kCriteoDense + 12]) << i;
    EXPECT_EQ(rows.sparse(i)[25], part.sparse[j * kCriteoSparse + 25]) << i;
  };
  expect_row(0, a.expected, 0);
  expect_row(4, a.expected, 4);
  expect_row(5, b.expected, 0);
  expect_row(6, c.expected, 0);
  expect_row(12, c.expected, 6);
}

TEST(FileList, PatternsInNaturalOrderAndTheSidecarsSkipped) {
  TempDir dir;
  for (const char* name : {"day_10", "day_2", "day_0", "day_1", "day_0.ftcache", "day_1.json", "other"})
    write_text(dir.file(name), "x");
  const std::string d = dir.path().string();
  EXPECT_EQ(expand_file_list(d + "/day_*", "t", {".ftcache", ".json"}),
            (std::vector<std::string>{d + "/day_0", d + "/day_1", d + "/day_2", d + "/day_10"}));
  EXPECT_EQ(expand_file_list(d + "/other," + d + "/day_1*", "t", {".json"}),
            (std::vector<std::string>{d + "/other", d + "/day_1", d + "/day_10"}));
  EXPECT_EQ(glob_files(d + "/day_?", FileOrder::Bytewise, "t"),
            (std::vector<std::string>{d + "/day_0", d + "/day_1", d + "/day_2"}));
  EXPECT_FT_ERROR(expand_file_list(d + "/none_*", "--data", {}), "--data: no file matches");
  EXPECT_FT_ERROR(expand_file_list(d + "/missing", "--data", {}), "'" + d + "/missing' is not a file");
  EXPECT_FT_ERROR(expand_file_list(d + "/day_0,", "--data", {}), "an empty entry");
  EXPECT_FT_ERROR(expand_file_list(d + "/day_0,," + d + "/day_1", "--data", {}), "an empty entry");
  EXPECT_FT_ERROR(expand_file_list(d + "/day_1.*", "--data", {".json"}), "matches only files it skips");
  EXPECT_FT_ERROR(expand_file_list("", "--data", {}), "no file given");
}

TEST(CriteoDataset, StaleCacheIsRebuilt) {
  TsvFixture f;
  CriteoDataset::open(f.path);
  fs::last_write_time(f.path, fs::last_write_time(f.path) + std::chrono::seconds(3));
  EXPECT_FALSE(CriteoDataset::open(f.path).cache_reused());
  EXPECT_TRUE(CriteoDataset::open(f.path).cache_reused());
  // New rows: the size changes, and the rebuilt cache holds them.
  RandomRows more(3, f.rng);
  write_text(f.path, f.rows.tsv(f.rng) + "\n" + more.tsv(f.rng));
  CriteoColumns all = f.rows.expected;
  all.labels.insert(all.labels.end(), more.expected.labels.begin(), more.expected.labels.end());
  all.dense.insert(all.dense.end(), more.expected.dense.begin(), more.expected.dense.end());
  all.sparse.insert(all.sparse.end(), more.expected.sparse.begin(), more.expected.sparse.end());
  const CriteoDataset grown = CriteoDataset::open(f.path);
  EXPECT_FALSE(grown.cache_reused());
  expect_rows(grown, all);
  // A cache built with another skip_bad_lines is not reused.
  const CriteoDataset skipping = CriteoDataset::open(f.path, {.skip_bad_lines = true});
  EXPECT_FALSE(skipping.cache_reused());
  EXPECT_EQ(skipping.bad_lines(), 0);
  EXPECT_TRUE(CriteoDataset::open(f.path, {.skip_bad_lines = true}).cache_reused());
}

// An edit that keeps the file's size and its mtime (a fixed digit, times preserved by a copy)
// still invalidates the cache: it is keyed by the content too.
TEST(CriteoDataset, EditKeepingSizeAndMtimeRebuildsTheCache) {
  TsvFixture f;
  CriteoDataset::open(f.path);
  const auto mtime = fs::last_write_time(f.path);
  std::string text = read_text(f.path);
  // The first row's label, 0 or 1, flipped: one byte, the same length.
  ASSERT_TRUE(text[0] == '0' || text[0] == '1');
  text[0] = text[0] == '0' ? '1' : '0';
  write_text(f.path, text);
  fs::last_write_time(f.path, mtime);
  const CriteoDataset edited = CriteoDataset::open(f.path);
  EXPECT_FALSE(edited.cache_reused());
  CriteoColumns expected = f.rows.expected;
  expected.labels[0] = static_cast<uint8_t>(text[0] == '1');
  expect_rows(edited, expected);
}

// The cache `good` with its header's row count (bytes 32..39) replaced by another N < 2^63 whose
// payload size, 8·ceil(N / 8) + 156·N bytes, wraps around 2^64 to the real one. The checksum
// covers only the payload, so nothing else gives the edit away.
std::string with_wrapping_row_count(const std::string& good) {
  int64_t rows = 0;
  std::memcpy(&rows, good.data() + 32, 8);
  const uint64_t total = (static_cast<uint64_t>(rows) + 7) / 8 * 8 + 156 * static_cast<uint64_t>(rows);
  uint64_t inverse = 157;  // of 157 modulo 2^64, by Newton's iteration (each step doubles the bits)
  for (int i = 0; i < 6; ++i) inverse *= 2 - 157 * inverse;
  for (uint64_t a = 0; a < 8; ++a) {  // N = 8m + a: total = 8·157·m + 156·a + 8·[a > 0]
    const uint64_t rest = total - 156 * a - (a ? 8 : 0);
    if (rest % 8 != 0) continue;
    const uint64_t n = 8 * ((rest / 8 * inverse) & ((uint64_t{1} << 61) - 1)) + a;
    if (n == static_cast<uint64_t>(rows) || n >= (uint64_t{1} << 63)) continue;
    std::string edited = good;
    std::memcpy(edited.data() + 32, &n, 8);
    return edited;
  }
  ADD_FAILURE() << "no wrapping row count for " << rows << " rows";
  return good;
}

TEST(CriteoDataset, CorruptCacheIsRebuilt) {
  TsvFixture f;
  CriteoDataset::open(f.path);
  const std::string cache = f.path + ".ftcache";
  const std::string good = read_text(cache);
  std::mt19937_64 rng(test::test_seed(1));
  auto corrupt = [&](const std::string& bytes, const char* what) {
    write_text(cache, bytes);
    const CriteoDataset ds = CriteoDataset::open(f.path);
    EXPECT_FALSE(ds.cache_reused()) << what;
    expect_rows(ds, f.rows.expected);
    EXPECT_EQ(read_text(cache), good) << what << ": the rebuilt cache differs";
  };
  for (int i = 0; i < 4; ++i) {
    std::string flipped = good;
    flipped[64 + rng() % (good.size() - 64)] ^= static_cast<char>(1 << (rng() % 8));
    corrupt(flipped, "a flipped payload bit");
  }
  corrupt(good.substr(0, good.size() - 1 - rng() % 100), "truncated");
  corrupt(good.substr(0, 40), "cut inside the header");
  corrupt(good + "x", "trailing data");
  std::string magic = good, version = good;
  magic[0] = 'X';
  version[8] = 99;
  corrupt(magic, "bad magic");
  corrupt(version, "unknown version");
  corrupt(with_wrapping_row_count(good), "a row count whose payload size wraps to the real one");
  EXPECT_TRUE(CriteoDataset::open(f.path).cache_reused());
}

TEST(CriteoDataset, UnwritableCacheKeepsTheRowsInMemory) {
  TsvFixture f;
  // A folder under a regular file can never be made, not even by root.
  const CriteoDataset ds = CriteoDataset::open(f.path, {.cache_dir = f.path + "/caches"});
  EXPECT_FALSE(ds.cache_reused());
  expect_rows(ds, f.rows.expected);
}

// dlrm's split written out as its numpy code does it: divmod into 7 days, the last day halved
// by np.array_split (the first part takes the extra row).
CriteoSplit numpy_split(int64_t n) {
  std::vector<int64_t> days(7, n / 7);
  for (int64_t j = 0; j < n % 7; ++j) ++days[static_cast<size_t>(j)];
  int64_t train = 0;
  for (int j = 0; j < 6; ++j) train += days[static_cast<size_t>(j)];
  const int64_t test = days[6] / 2 + days[6] % 2;
  return {{0, train}, {train, train + test}, {train + test, n}};
}

TEST(CriteoSplit, MatchesDlrmsNumpySplit) {
  for (int64_t n : {0, 1, 6, 7, 13, 14, 15, 699, 700, 701, 45840617}) {
    const CriteoSplit s = criteo_kaggle_split(n), ref = numpy_split(n);
    EXPECT_EQ(s.train, ref.train) << n;
    EXPECT_EQ(s.test, ref.test) << n;
    EXPECT_EQ(s.val, ref.val) << n;
    EXPECT_EQ(s.range("val"), s.val);
  }
  const CriteoSplit s = criteo_kaggle_split(701);
  EXPECT_EQ(s.train.size() + s.test.size() + s.val.size(), 701);
  EXPECT_FT_ERROR(s.range("valid"), "no split named 'valid'");
}

// A dataset of random values, and table sizes from 1 to 2^31.
struct BatchFixture {
  std::mt19937_64 rng{test::test_seed()};
  CriteoDataset data;
  std::vector<int64_t> tables;
  BatchFixture() {
    CriteoColumns c;
    for (int i = 0; i < 100; ++i) {
      c.labels.push_back(static_cast<uint8_t>(rng() % 2));
      for (int j = 0; j < kCriteoDense; ++j) c.dense.push_back(static_cast<float>(rng() % 1000) / 7);
      for (int t = 0; t < kCriteoSparse; ++t) c.sparse.push_back(static_cast<uint32_t>(rng()));
    }
    data = CriteoDataset::from_columns(std::move(c));
    tables = {1, 2, 3, 1000, int64_t{1} << 31, (int64_t{1} << 31) - 1};
    while (tables.size() < kCriteoSparse) tables.push_back(1 + static_cast<int64_t>(rng() % (uint64_t{1} << 31)));
  }
};

TEST(CriteoBatchSource, WritesModuloIdsInTheSamplersOrder) {
  BatchFixture f;
  const RowRange range{10, 90};
  CriteoBatchSource source(f.data, range, f.tables, BatchSampler(range.size(), 16, 7));
  BatchSampler sampler(range.size(), 16, 7);
  EXPECT_EQ(source.batches_per_epoch(), 5);
  std::vector<double> first_epoch;
  for (int64_t step = 0; step < 12; ++step) {
    const int64_t epoch = step / 5, b = step % 5;
    if (b == 0) sampler.start_epoch(epoch);
    const Batch batch = source.next();
    ASSERT_EQ(batch.at("dense").shape(), (Shape{16, kCriteoDense}));
    ASSERT_EQ(batch.at("sparse").shape(), (Shape{16, kCriteoSparse}));
    ASSERT_EQ(batch.at("labels").shape(), (Shape{16}));
    EXPECT_EQ(batch.at("dense").dtype(), DType::F32);
    EXPECT_EQ(batch.at("sparse").dtype(), DType::I32);
    EXPECT_EQ(batch.at("labels").dtype(), DType::F32);
    const std::vector<double> ids = sampler.batch_ids(b).to_vector();
    if (epoch == 0) first_epoch.insert(first_epoch.end(), ids.begin(), ids.end());
    if (epoch == 1 && b == 0) {
      EXPECT_NE(ids, std::vector<double>(first_epoch.begin(), first_epoch.begin() + 16));
    }
    const float* dense = batch.at("dense").data<float>();
    const int32_t* sparse = batch.at("sparse").data<int32_t>();
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t row = range.begin + static_cast<int64_t>(ids[static_cast<size_t>(i)]);
      EXPECT_EQ(batch.at("labels").data<float>()[i], static_cast<float>(f.data.label(row)));
      EXPECT_EQ(std::memcmp(dense + i * kCriteoDense, f.data.dense(row), kCriteoDense * sizeof(float)), 0);
      for (int t = 0; t < kCriteoSparse; ++t)
        ASSERT_EQ(sparse[i * kCriteoSparse + t], static_cast<int64_t>(f.data.sparse(row)[t] % f.tables[t]))
            << "table " << t << " of " << f.tables[t] << " rows";
    }
  }
  EXPECT_EQ(std::set<double>(first_epoch.begin(), first_epoch.end()).size(), 80u);
}

TEST(CriteoBatchSource, PositionResumesTheSameBatches) {
  BatchFixture f;
  const RowRange range{0, 100};
  auto make = [&] { return CriteoBatchSource(f.data, range, f.tables, BatchSampler(100, 32, 3)); };
  CriteoBatchSource a = make();
  for (int i = 0; i < 4; ++i) a.next();  // 3 batches an epoch: now inside epoch 1
  const DataPosition saved = a.position();
  EXPECT_EQ(saved, (DataPosition{{"epoch", "1"}, {"batch", "1"}}));
  CriteoBatchSource b = make();
  b.set_position(saved);
  for (int i = 0; i < 5; ++i) {
    const Batch x = a.next(), y = b.next();
    for (const char* name : {"dense", "sparse", "labels"}) EXPECT_EQ(x.at(name).to_vector(), y.at(name).to_vector());
  }
  EXPECT_FT_ERROR(b.set_position({{"epoch", "0"}, {"batch", "3"}}), "no batch 3");
  // Evaluation keeps the last partial batch, in file order.
  CriteoBatchSource eval(f.data, {0, 70}, f.tables, BatchSampler(70, 32, 0, false, false));
  EXPECT_EQ(eval.batches_per_epoch(), 3);
  eval.next();
  eval.next();
  const Batch last = eval.next();
  ASSERT_EQ(last.at("labels").shape(), (Shape{6}));
  EXPECT_EQ(last.at("labels").data<float>()[5], static_cast<float>(f.data.label(69)));
}

TEST(CriteoBatchSource, RejectsBadTablesAndRanges) {
  BatchFixture f;
  auto make = [&](std::vector<int64_t> tables, RowRange range) {
    return CriteoBatchSource(f.data, range, std::move(tables), BatchSampler(range.size(), 4, 0));
  };
  std::vector<int64_t> too_big = f.tables, empty = f.tables;
  too_big[3] = (int64_t{1} << 31) + 1;
  empty[0] = 0;
  EXPECT_FT_ERROR(make(too_big, {0, 10}), "table 3 has 2147483649 rows");
  EXPECT_FT_ERROR(make(empty, {0, 10}), "table 0 has 0 rows");
  EXPECT_FT_ERROR(make({10, 20}, {0, 10}), "2 table sizes given");
  EXPECT_FT_ERROR(make(f.tables, {90, 110}), "not inside the dataset");
  EXPECT_FT_ERROR(CriteoBatchSource(f.data, {0, 10}, f.tables, BatchSampler(20, 4, 0)), "the sampler is over 20");
}

// The AUC by its definition: the share of (positive, negative) pairs ordered right, ties half.
double pair_count_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = 0; j < s.size(); ++j)
      if (y[i] == 1 && y[j] == 0) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

TEST(BinaryMetrics, ExactAucEqualsThePairCount) {
  std::mt19937_64 rng(test::test_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 2 + rng() % 300;
    const int levels = 1 + static_cast<int>(rng() % 20);  // few levels: many ties
    std::vector<float> s(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = static_cast<float>(rng() % 2);
      s[i] = static_cast<float>(rng() % static_cast<uint64_t>(levels)) - 0.3f * y[i] * static_cast<float>(rng() % 2);
    }
    y[0] = 0, y[1] = 1;
    EXPECT_NEAR(exact_auc(s, y), pair_count_auc(s, y), 1e-12) << n << " scores on " << levels << " levels";
  }
  EXPECT_FT_ERROR(exact_auc({0.1f, 0.2f}, {1, 1}), "one class");
  EXPECT_FT_ERROR(exact_auc({0.1f, 0.2f}, {1}), "2 scores but 1 labels");
  EXPECT_FT_ERROR(exact_auc({0.1f, 0.2f}, {1, 0.5f}), "not 0 or 1");
  EXPECT_FT_ERROR(exact_auc({0.1f, NAN}, {1, 0}), "NaN");
}

TEST(BinaryMetrics, LoglossAndAccuracyFromLogits) {
  std::mt19937_64 rng(test::test_seed());
  std::vector<float> z(500), y(500);
  long double loss = 0;
  double right = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    z[i] = static_cast<float>(static_cast<double>(rng() % 20001) / 100.0 - 100.0);  // up to ±100: p rounds to 0 or 1
    y[i] = static_cast<float>(rng() % 2);
    // -log sigmoid(±z) = log(1 + exp(∓z)): no cancellation, and exp(100) is in range.
    const long double sign = y[i] == 1 ? -1.0L : 1.0L;
    loss += std::log1p(std::exp(sign * static_cast<long double>(z[i])));
    right += (z[i] > 0) == (y[i] == 1);
  }
  const BinaryMetrics m = binary_metrics_from_logits(z, y);
  EXPECT_EQ(m.count, 500);
  EXPECT_NEAR(m.logloss, static_cast<double>(loss / 500), 1e-9 * static_cast<double>(loss / 500));
  EXPECT_DOUBLE_EQ(m.accuracy, right / 500);
  EXPECT_DOUBLE_EQ(m.auc, exact_auc(z, y));
  EXPECT_DOUBLE_EQ(m.positive_rate, std::count(y.begin(), y.end(), 1.0f) / 500.0);
}

// What cannot be measured is NaN and named; the rest is still reported. An empty split is an error.
TEST(BinaryMetrics, UnmeasurableAucIsNamedAndTheRestReported) {
  std::mt19937_64 rng(test::test_seed());
  std::vector<float> z(300), y(300, 0.0f);
  for (float& v : z) v = static_cast<float>(static_cast<double>(rng() % 2001) / 100.0 - 10.0);
  const BinaryMetrics one_class = binary_metrics_from_logits(z, y);
  EXPECT_TRUE(std::isnan(one_class.auc));
  EXPECT_EQ(one_class.auc_missing, "the labels are all of one class");
  EXPECT_TRUE(std::isfinite(one_class.logloss));
  EXPECT_GT(one_class.logloss, 0.0);
  EXPECT_DOUBLE_EQ(one_class.accuracy, static_cast<double>(std::count_if(z.begin(), z.end(), [](float v) {
                                                             return v <= 0;
                                                           })) / 300.0);
  y[7] = 1.0f;
  z[3] = NAN;
  const BinaryMetrics nan_scores = binary_metrics_from_logits(z, y);
  EXPECT_TRUE(std::isnan(nan_scores.auc));
  EXPECT_EQ(nan_scores.auc_missing, "NaN scores");
  z[3] = 0.5f;
  const BinaryMetrics both = binary_metrics_from_logits(z, y);
  EXPECT_TRUE(both.auc_missing.empty());
  EXPECT_DOUBLE_EQ(both.auc, exact_auc(z, y));
  EXPECT_FT_ERROR(binary_metrics_from_logits({}, {}), "no predictions to measure");
  EXPECT_FT_ERROR(binary_metrics_from_logits({0.5f}, {2.0f}), "not 0 or 1");
}

TEST(CriteoSynthetic, SameSeedSameBytesAndItParsesBack) {
  TempDir dir;
  const SyntheticCriteoOptions options{.rows = 20000, .seed = test::test_seed(), .table_rows = {5000}};
  const SyntheticCriteoInfo info = write_synthetic_criteo(dir.file("a.tsv"), options);
  write_synthetic_criteo(dir.file("b.tsv"), options);
  SyntheticCriteoOptions other = options;
  ++other.seed;
  write_synthetic_criteo(dir.file("c.tsv"), other);
  EXPECT_EQ(read_text(dir.file("a.tsv")), read_text(dir.file("b.tsv")));
  EXPECT_NE(read_text(dir.file("a.tsv")), read_text(dir.file("c.tsv")));

  const CriteoDataset ds = CriteoDataset::open(dir.file("a.tsv"));
  ASSERT_EQ(ds.rows(), options.rows);
  EXPECT_EQ(ds.bad_lines(), 0);
  std::vector<float> labels;
  int64_t missing = 0, negative = 0;
  for (int64_t i = 0; i < ds.rows(); ++i) {
    labels.push_back(ds.label(i));
    missing += std::count(ds.sparse(i), ds.sparse(i) + kCriteoSparse, 0u);
  }
  const std::string text = read_text(dir.file("a.tsv"));
  negative = std::count(text.begin(), text.end(), '-');
  EXPECT_GT(missing, 0);
  EXPECT_GT(negative, 0);
  // Each feature's vocabulary is 10 to 100 values (besides missing), so a small DLRM can learn them.
  for (int t = 0; t < kCriteoSparse; ++t) {
    std::set<uint32_t> values;
    for (int64_t i = 0; i < ds.rows(); ++i)
      if (ds.sparse(i)[t] != 0) values.insert(ds.sparse(i)[t]);
    EXPECT_GE(values.size(), 10u) << "C" << t + 1;
    EXPECT_LE(values.size(), 100u) << "C" << t + 1;
  }
  const double rate = std::count(labels.begin(), labels.end(), 1.0f) / static_cast<double>(labels.size());
  EXPECT_DOUBLE_EQ(info.positive_rate, rate);
  EXPECT_GT(rate, 0.2);
  EXPECT_LT(rate, 0.3);
  // The labels were drawn from the logits: their mean probability matches the drawn rate.
  double mean_p = 0;
  for (float z : info.true_logits) mean_p += 1 / (1 + std::exp(-static_cast<double>(z))) / labels.size();
  EXPECT_NEAR(mean_p, rate, 4 * std::sqrt(0.25 * 0.75 / labels.size()));
  EXPECT_DOUBLE_EQ(info.best_auc, exact_auc(info.true_logits, labels));
  EXPECT_GT(info.best_auc, 0.72);
  EXPECT_LT(info.best_auc, 0.88);
  const RowRange test = criteo_kaggle_split(ds.rows()).test;
  const std::vector<float> test_z(info.true_logits.begin() + test.begin, info.true_logits.begin() + test.end),
      test_y(labels.begin() + test.begin, labels.begin() + test.end);
  EXPECT_DOUBLE_EQ(info.best_test_auc, exact_auc(test_z, test_y));

  const SyntheticCriteoInfo read = read_synthetic_criteo_info(dir.file("a.tsv"));
  EXPECT_EQ(read.rows, info.rows);
  EXPECT_EQ(read.seed, info.seed);
  EXPECT_EQ(read.table_rows, std::vector<int64_t>(kCriteoSparse, 5000));
  EXPECT_EQ(read.positive_rate, info.positive_rate);
  EXPECT_EQ(read.best_auc, info.best_auc);
  EXPECT_EQ(read.best_test_auc, info.best_test_auc);
  EXPECT_FT_ERROR(read_synthetic_criteo_info(dir.file("missing.tsv")), "missing.tsv.json");
}

// Day files of one hidden model, Criteo 1TB's shape: ids spread over each table's whole range
// (and below its rows), a popular head and a long tail, each day its own rows.
TEST(CriteoSynthetic, DaysDrawFullRangeIdsOfOneModel) {
  TempDir dir;
  std::vector<int64_t> rows(kCriteoSparse, 1000);
  rows[0] = 3;
  rows[1] = 40000000;
  const SyntheticCriteoOptions day0{.rows = 20000, .seed = test::test_seed(), .table_rows = rows,
                                    .full_range_ids = true, .day = 0, .test_first_half = true};
  SyntheticCriteoOptions day1 = day0;
  day1.day = 1;
  const SyntheticCriteoInfo info = write_synthetic_criteo(dir.file("day_0"), day0);
  write_synthetic_criteo(dir.file("day_1"), day1);
  EXPECT_NE(read_text(dir.file("day_0")), read_text(dir.file("day_1")));
  const CriteoDataset ds = CriteoDataset::open(dir.file("day_0"));
  std::set<uint32_t> big, small;
  std::map<uint32_t, int> counts;
  for (int64_t i = 0; i < ds.rows(); ++i) {
    for (int t = 0; t < kCriteoSparse; ++t) EXPECT_LT(ds.sparse(i)[t], static_cast<uint32_t>(rows[t]));
    big.insert(ds.sparse(i)[1]);
    small.insert(ds.sparse(i)[0]);
    ++counts[ds.sparse(i)[1]];
  }
  EXPECT_LE(small.size(), 3u);
  EXPECT_GT(big.size(), 1000u);  // a long tail over the 40M ids
  uint32_t top = 0;
  for (const auto& [id, n] : counts) top = std::max<uint32_t>(top, static_cast<uint32_t>(n));
  EXPECT_GT(top, 20u);  // and a popular head
  EXPECT_GT(*big.rbegin(), 1000000u);  // across the range, not its first rows
  // best_test_auc over the first half (MLPerf's test half of day_23).
  std::vector<float> labels;
  for (int64_t i = 0; i < ds.rows() / 2; ++i) labels.push_back(ds.label(i));
  const std::vector<float> z(info.true_logits.begin(), info.true_logits.begin() + ds.rows() / 2);
  EXPECT_DOUBLE_EQ(info.best_test_auc, exact_auc(z, labels));
  EXPECT_GT(info.best_auc, 0.7);
}

TEST(CriteoSynthetic, RejectsBadOptions) {
  TempDir dir;
  EXPECT_FT_ERROR(write_synthetic_criteo(dir.file("x.tsv"), {.rows = 1}), "at least 2 rows");
  EXPECT_FT_ERROR(write_synthetic_criteo(dir.file("x.tsv"), {.table_rows = {1, 2}}), "1 or 26 table sizes");
  EXPECT_FT_ERROR(write_synthetic_criteo(dir.file("x.tsv"), {.table_rows = {0}}), "outside [1, 2^31]");
  EXPECT_FALSE(fs::exists(dir.file("x.tsv")));
}

}  // namespace
}  // namespace ft
