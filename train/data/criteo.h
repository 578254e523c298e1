// The Criteo Kaggle click logs for a DLRM: the TSV file (its parser is train/data/criteo_tsv.h), a
// memory-mapped binary cache of the parsed columns, dlrm's train/test/val split, and the batch
// source that feeds a model.
//
// B: batch size, N: rows.
//
// The cache (`<tsv>.ftcache` unless a folder is given) is a 72-byte header (magic "FTCRITEO",
// format version 2, the TSV's size and mtime in ns, N, the bad-line count, skip_bad_lines, payload
// length, a 64-bit checksum of the payload, and a hash of the TSV's content: all of it up to 64 MiB,
// else its first and last MiB) followed by labels u8[N] padded to 8 bytes,
// dense f32[N, 13] and sparse u32[N, 26], each row's values contiguous, in the host's (little-
// endian) byte order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/data/batch_source.h"
#include "train/data/batches.h"
#include "train/data/criteo_tsv.h"

namespace ft {

/// Parses the TSV at `path` (no cache): parse_criteo_text on the file's bytes. A missing or
/// unreadable file is an ft::Error naming it too.
CriteoColumns parse_criteo_tsv(const std::string& path, bool skip_bad_lines = false);

struct CriteoOpenOptions {
  bool skip_bad_lines = false;  ///< skip and count malformed lines instead of failing
  std::string cache_dir{};      ///< the cache's folder (created if missing); empty: beside the TSV
  bool cache = true;            ///< false: parse every time, never read or write a cache
  /// Text parsed at a time while the cache is built (whole lines; tests make it small).
  int64_t piece_bytes = int64_t{64} << 20;
};

/// The rows of a Criteo TSV, read from its cache when the cache matches the file. Copies share
/// the same (read-only) memory.
class CriteoDataset {
 public:
  /// Maps the cache of `tsv_path` when it was built from this very file (same size, mtime and
  /// content hash) with the same skip_bad_lines and its checksum holds; otherwise parses the TSV
  /// (parse_criteo_tsv's errors) into the cache, piece by piece (64 MB of text at a time, so no
  /// file has to fit in memory), written atomically. A stale or corrupt cache is rebuilt, with
  /// one line on stderr saying why; a cache that cannot be written is reported on stderr and the
  /// parsed rows stay in memory. Checking the checksum reads the whole cache once (about a
  /// second for the 7 GB of the full Kaggle set in the page cache).
  static CriteoDataset open(const std::string& tsv_path, const CriteoOpenOptions& options = {});
  /// A dataset over columns already in memory (no file, no cache).
  static CriteoDataset from_columns(CriteoColumns columns);
  /// A dataset over the columns of a mapped cache (open's), kept alive by `storage`.
  static CriteoDataset over_cache(std::shared_ptr<const void> storage, const uint8_t* labels, const float* dense,
                                  const uint32_t* sparse, int64_t rows, int64_t bad_lines, std::string cache_path);

  int64_t rows() const { return rows_; }
  /// Row i's label, 0 or 1.
  uint8_t label(int64_t i) const { return labels_[i]; }
  /// Row i's 13 dense values, log(x + 1).
  const float* dense(int64_t i) const { return dense_ + i * kCriteoDense; }
  /// Row i's 26 categorical values, before any modulo.
  const uint32_t* sparse(int64_t i) const { return sparse_ + i * kCriteoSparse; }
  /// Lines skipped as malformed when the rows were parsed (0 unless skip_bad_lines).
  int64_t bad_lines() const { return bad_lines_; }
  /// Whether open() mapped an existing cache instead of parsing the TSV.
  bool cache_reused() const { return cache_reused_; }
  /// The cache file open() read or wrote; empty when no cache was involved.
  const std::string& cache_path() const { return cache_path_; }

 private:
  std::shared_ptr<const void> storage_;  // the mapped cache or the parsed columns
  const uint8_t* labels_ = nullptr;
  const float* dense_ = nullptr;
  const uint32_t* sparse_ = nullptr;
  int64_t rows_ = 0, bad_lines_ = 0;
  bool cache_reused_ = false;
  std::string cache_path_;
};

/// Several datasets read as one, in order: the rows of the first, then of the second, and so on
/// (Criteo 1TB's day files). Copies share the datasets' memory.
class CriteoRows {
 public:
  CriteoRows(CriteoDataset one);  // NOLINT: one dataset is one part
  explicit CriteoRows(std::vector<CriteoDataset> parts);
  int64_t rows() const { return starts_.back(); }
  uint8_t label(int64_t i) const {
    const auto [part, row] = at(i);
    return part->label(row);
  }
  const float* dense(int64_t i) const {
    const auto [part, row] = at(i);
    return part->dense(row);
  }
  const uint32_t* sparse(int64_t i) const {
    const auto [part, row] = at(i);
    return part->sparse(row);
  }
  /// The first row of each part, and the rows in all: [parts + 1].
  const std::vector<int64_t>& starts() const { return starts_; }

 private:
  /// Row i's part and its row there.
  std::pair<const CriteoDataset*, int64_t> at(int64_t i) const;
  std::vector<CriteoDataset> parts_;
  std::vector<int64_t> starts_;
};

/// Rows [begin, end) of a dataset.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

/// The three consecutive parts of a Kaggle run, in file order: train, then test, then val.
struct CriteoSplit {
  RowRange train, test, val;
  /// The range named "train", "test" or "val"; any other name is an ft::Error.
  const RowRange& range(const std::string& name) const;
};

/// dlrm's Kaggle split of N rows: its seven "days" take N / 7 rows each, the first N % 7 days
/// one more, so train is the first N - floor(N / 7) rows; the last day is halved, test the
/// first ceil(half) and val the rest.
CriteoSplit criteo_kaggle_split(int64_t rows);

/// Batches of a row range of a CriteoDataset in a BatchSampler's order: "dense" f32 [B, 13],
/// "sparse" i32 [B, 26] (each value modulo its table's row count) and "labels" f32 [B] (0 or 1).
/// After an epoch's last batch the next epoch starts with the sampler's next permutation. Its
/// position is {"epoch", "batch"}.
class CriteoBatchSource : public WritingBatchSource {
 public:
  /// `table_rows` holds the 26 embedding tables' row counts, each in [1, 2^31]; the sampler must
  /// be over range.size() rows (shuffle and drop_last for training, neither for evaluation).
  CriteoBatchSource(CriteoRows data, RowRange range, std::vector<int64_t> table_rows, BatchSampler sampler);
  /// Writes the batch straight into `out`'s buffers.
  void next_into(BatchWriter& out) override;
  DataPosition position() const override;
  void set_position(const DataPosition& position) override;
  int64_t batches_per_epoch() const { return batches_.batches_per_epoch(); }

 private:
  CriteoRows data_;
  RowRange range_;
  std::vector<uint32_t> table_rows_;
  std::vector<uint64_t> modulo_magic_;  // per table: 2^64 / rows, rounded up (Lemire's fastmod)
  EpochBatches batches_;
};

}  // namespace ft
