#include "train/data/criteo.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include "lib/error.h"
#include "train/io/atomic_file.h"

namespace ft {

namespace {

// A file mapped read-only for as long as the object lives.
class MappedFile {
 public:
  /// Maps `path` whole; `op` starts the error messages. An empty file maps to nothing.
  MappedFile(const std::string& path, const char* op, int advice) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FT_CHECK(fd >= 0, op, ": cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    const int stat_errno = errno;
    size_ = stat_ok ? static_cast<size_t>(st.st_size) : 0;
    void* p = size_ > 0 ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    const int map_errno = errno;
    ::close(fd);
    FT_CHECK(stat_ok, op, ": cannot stat '", path, "': ", std::strerror(stat_errno));
    FT_CHECK(p != MAP_FAILED, op, ": cannot map '", path, "': ", std::strerror(map_errno));
    data_ = static_cast<const char*>(p);
    if (data_ != nullptr) ::madvise(p, size_, advice);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// ---- the cache

constexpr char kCacheMagic[8] = {'F', 'T', 'C', 'R', 'I', 'T', 'E', 'O'};
constexpr uint32_t kCacheVersion = 2;  // 2: the TSV's content hash in the header

struct CacheHeader {
  char magic[8];
  uint32_t version;
  uint32_t skip_bad_lines;
  int64_t source_size;
  int64_t source_mtime_ns;
  int64_t rows;
  int64_t bad_lines;
  int64_t payload_bytes;
  uint64_t checksum;
  uint64_t source_hash;  // SourceStamp::content_hash
};
static_assert(sizeof(CacheHeader) == 72);

// Byte offsets of the columns inside the payload.
struct PayloadLayout {
  size_t dense, sparse, total;
};
PayloadLayout payload_layout(int64_t rows) {
  const auto n = static_cast<size_t>(rows);
  const size_t dense = (n + 7) / 8 * 8;
  const size_t sparse = dense + n * kCriteoDense * sizeof(float);
  return {dense, sparse, sparse + n * kCriteoSparse * sizeof(uint32_t)};
}

// FNV-1a over 64-bit words in four interleaved lanes, then the lanes and the length folded
// together. The lanes' multiplications overlap, so a cache is checked at memory speed where
// byte-wise FNV-1a would add seconds per gigabyte to every open; every step is a bijection of
// its lane, so one changed word always changes that lane.
class Checksum {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    length_ += n;
    if (pending_ > 0) {
      const size_t take = std::min(n, kBlock - pending_);
      std::memcpy(buffer_ + pending_, p, take);
      pending_ += take, p += take, n -= take;
      if (pending_ < kBlock) return;
      block(buffer_);
      pending_ = 0;
    }
    for (; n >= kBlock; p += kBlock, n -= kBlock) block(p);
    std::memcpy(buffer_, p, n);
    pending_ = n;
  }
  uint64_t finish() {
    std::memset(buffer_ + pending_, 0, kBlock - pending_);
    block(buffer_);
    uint64_t h = kBasis;
    for (uint64_t lane : lanes_) h = (h ^ lane) * kPrime;
    h = (h ^ length_) * kPrime;
    return h ^ (h >> 32);
  }

 private:
  static constexpr size_t kBlock = 32;
  static constexpr uint64_t kBasis = 14695981039346656037ull, kPrime = 1099511628211ull;
  void block(const unsigned char* p) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      lanes_[i] = (lanes_[i] ^ w) * kPrime;
    }
  }
  uint64_t lanes_[4] = {kBasis, kBasis + 1, kBasis + 2, kBasis + 3};
  unsigned char buffer_[kBlock];
  size_t pending_ = 0;
  uint64_t length_ = 0;
};

// The TSV's size, mtime and content: a cache built from other ones is stale. The content hash
// covers the whole file up to kWholeHashBytes, else its first and last kSampleBytes, so an edit
// that keeps the size and the mtime (a copy that preserves times, a fixed line) is still seen
// in any file of that size, and in larger ones at either end. Taken before the parse, so a file
// changed during it leaves a cache that the next open rebuilds.
constexpr int64_t kWholeHashBytes = int64_t{64} << 20, kSampleBytes = int64_t{1} << 20;
struct SourceStamp {
  int64_t size = 0, mtime_ns = 0;
  uint64_t content_hash = 0;
};
uint64_t content_hash(const std::string& path, int64_t size) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in, "CriteoDataset: cannot open '", path, "': ", std::strerror(errno));
  Checksum sum;
  std::vector<char> buffer(static_cast<size_t>(std::min(size, kSampleBytes)));
  auto hash_range = [&](int64_t begin, int64_t end) {
    in.seekg(begin);
    for (int64_t at = begin; at < end;) {
      const auto n = static_cast<std::streamsize>(std::min<int64_t>(end - at, static_cast<int64_t>(buffer.size())));
      FT_CHECK(in.read(buffer.data(), n), "CriteoDataset: cannot read '", path, "'");
      sum.update(buffer.data(), static_cast<size_t>(n));
      at += n;
    }
  };
  if (size <= kWholeHashBytes) {
    hash_range(0, size);
  } else {
    hash_range(0, kSampleBytes);
    hash_range(size - kSampleBytes, size);
  }
  return sum.finish();
}
SourceStamp source_stamp(const std::string& path) {
  struct stat st {};
  FT_CHECK(::stat(path.c_str(), &st) == 0, "CriteoDataset: cannot open '", path, "': ", std::strerror(errno));
  const auto size = static_cast<int64_t>(st.st_size);
  return {size, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, content_hash(path, size)};
}

std::string cache_path_for(const std::string& tsv, const std::string& dir) {
  if (dir.empty()) return tsv + ".ftcache";
  return (std::filesystem::path(dir) / (std::filesystem::path(tsv).filename().string() + ".ftcache")).string();
}

// Why the mapped cache cannot stand for the TSV; empty when it can.
std::string cache_problem(const MappedFile& cache, const SourceStamp& stamp, bool skip_bad_lines) {
  if (cache.size() < sizeof(CacheHeader)) return "it is truncated (shorter than its header)";
  CacheHeader h;
  std::memcpy(&h, cache.data(), sizeof h);
  if (std::memcmp(h.magic, kCacheMagic, sizeof h.magic) != 0) return "it has a bad magic";
  if (h.version != kCacheVersion)
    return "it has format version " + std::to_string(h.version) + ", expected " + std::to_string(kCacheVersion);
  if (h.source_size != stamp.size || h.source_mtime_ns != stamp.mtime_ns || h.source_hash != stamp.content_hash)
    return "the TSV changed since it was built";
  if ((h.skip_bad_lines != 0) != skip_bad_lines)
    return std::string("it was built with skip_bad_lines ") + (h.skip_bad_lines ? "on" : "off");
  // Rows bounded by the file's size first: payload_layout of a row count near 2^63 wraps around
  // and can equal a real payload's length (the checksum covers the payload, not the header).
  if (h.rows < 0 || h.rows > static_cast<int64_t>(cache.size()) || h.bad_lines < 0 ||
      h.payload_bytes != static_cast<int64_t>(payload_layout(h.rows).total))
    return "its header is inconsistent";
  const size_t expected = sizeof(CacheHeader) + static_cast<size_t>(h.payload_bytes);
  if (cache.size() != expected)
    return "it is " + std::to_string(cache.size()) + " bytes, its header promises " + std::to_string(expected) +
           (cache.size() < expected ? " (truncated)" : " (trailing data)");
  Checksum sum;
  sum.update(cache.data() + sizeof(CacheHeader), static_cast<size_t>(h.payload_bytes));
  if (sum.finish() != h.checksum) return "its checksum does not match (corrupt)";
  return {};
}

// x mod d for any 32-bit x and d > 0 with a multiply instead of a division (Lemire, Kaser and
// Kurz, "Faster remainder by direct computation", 2019); `magic` is 2^64 / d rounded up.
uint64_t modulo_magic(uint32_t d) { return UINT64_MAX / d + 1; }
uint32_t fast_modulo(uint32_t x, uint64_t magic, uint32_t d) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(magic * x) * d) >> 64);
}

}  // namespace

CriteoColumns parse_criteo_tsv(const std::string& path, bool skip_bad_lines) {
  const MappedFile file(path, "parse_criteo_tsv", MADV_SEQUENTIAL);
  return parse_criteo_text(std::string_view(file.data(), file.size()), path, skip_bad_lines);
}

CriteoDataset CriteoDataset::from_columns(CriteoColumns columns) {
  const auto n = static_cast<size_t>(columns.rows());
  FT_CHECK(columns.dense.size() == n * kCriteoDense && columns.sparse.size() == n * kCriteoSparse,
           "CriteoDataset: ", n, " labels need ", n * kCriteoDense, " dense and ", n * kCriteoSparse,
           " sparse values, got ", columns.dense.size(), " and ", columns.sparse.size());
  auto storage = std::make_shared<CriteoColumns>(std::move(columns));
  CriteoDataset ds;
  ds.labels_ = storage->labels.data();
  ds.dense_ = storage->dense.data();
  ds.sparse_ = storage->sparse.data();
  ds.rows_ = storage->rows();
  ds.bad_lines_ = storage->bad_lines;
  ds.storage_ = std::move(storage);
  return ds;
}

namespace {

/// The dataset over a mapped cache that matches the TSV; nullopt (with `problem` saying why)
/// when the cache cannot stand for it.
std::optional<CriteoDataset> map_cache(const std::string& cache, const SourceStamp& stamp, bool skip_bad_lines,
                                       std::string& problem) {
  try {
    auto mapped = std::make_shared<MappedFile>(cache, "CriteoDataset", MADV_NORMAL);
    problem = cache_problem(*mapped, stamp, skip_bad_lines);
    if (!problem.empty()) return std::nullopt;
    CacheHeader h;
    std::memcpy(&h, mapped->data(), sizeof h);
    const char* payload = mapped->data() + sizeof(CacheHeader);
    const PayloadLayout layout = payload_layout(h.rows);
    return CriteoDataset::over_cache(std::move(mapped), reinterpret_cast<const uint8_t*>(payload),
                                     reinterpret_cast<const float*>(payload + layout.dense),
                                     reinterpret_cast<const uint32_t*>(payload + layout.sparse), h.rows, h.bad_lines,
                                     cache);
  } catch (const Error& e) {
    problem = e.what();
    return std::nullopt;
  }
}

/// A temporary file the cache is assembled from, removed when done.
struct PartFile {
  std::string path;
  std::ofstream out;
  explicit PartFile(std::string p) : path(std::move(p)), out(path, std::ios::binary | std::ios::trunc) {
    FT_CHECK(out.good(), "CriteoDataset: cannot write '", path, "'");
  }
  ~PartFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  void append(const void* data, size_t bytes) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    FT_CHECK(out.good(), "CriteoDataset: cannot write '", path, "' (disk full?)");
  }
};

/// Feeds `bytes` bytes of the file `path` to `sink` in pieces of a few MB.
template <class Sink>
void stream_file(const std::string& path, size_t bytes, Sink&& sink) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(size_t{8} << 20);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(buffer.size(), bytes - done);
    FT_CHECK(in.read(buffer.data(), static_cast<std::streamsize>(n)), "CriteoDataset: cannot read '", path, "'");
    sink(buffer.data(), n);
    done += n;
  }
}

/// Parses the TSV piece by piece into the cache: each piece's columns go to three part files,
/// which are then joined behind the header. The rows are never all in memory at once, so a
/// Criteo 1TB day file (about 45 GB of text) converts on a machine with less than that.
void build_cache(const std::string& tsv, const std::string& cache, const SourceStamp& stamp, bool skip_bad_lines,
                 size_t piece_bytes) {
  const MappedFile text(tsv, "parse_criteo_tsv", MADV_SEQUENTIAL);
  FT_CHECK(text.size() > 0, "parse_criteo_tsv: '", tsv, "' is empty");
  PartFile labels(cache + ".labels.part"), dense(cache + ".dense.part"), sparse(cache + ".sparse.part");
  int64_t rows = 0, bad_lines = 0, line = 1;
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.size(), at + std::max<size_t>(piece_bytes, 1));
    if (end < text.size()) {  // whole lines: up to the next line end
      const void* nl = std::memchr(text.data() + end, '\n', text.size() - end);
      end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1 : text.size();
    }
    const std::string_view piece(text.data() + at, end - at);
    const CriteoColumns c = parse_criteo_lines(piece, tsv, skip_bad_lines, line);
    labels.append(c.labels.data(), c.labels.size());
    dense.append(c.dense.data(), c.dense.size() * sizeof(float));
    sparse.append(c.sparse.data(), c.sparse.size() * sizeof(uint32_t));
    rows += c.rows();
    bad_lines += c.bad_lines;
    line += std::count(piece.begin(), piece.end(), '\n');
    at = end;
  }
  FT_CHECK(rows > 0, "parse_criteo_tsv: '", tsv, "' has no valid line (", bad_lines, " malformed lines skipped)");
  for (PartFile* part : {&labels, &dense, &sparse}) {
    part->out.close();
    FT_CHECK(!part->out.fail(), "CriteoDataset: cannot write '", part->path, "'");
  }
  const PayloadLayout layout = payload_layout(rows);
  const std::vector<char> pad(layout.dense - static_cast<size_t>(rows), 0);
  const std::pair<PartFile*, size_t> parts[] = {{&labels, static_cast<size_t>(rows)},
                                                {&dense, layout.sparse - layout.dense},
                                                {&sparse, layout.total - layout.sparse}};
  // The payload's checksum, read back in the payload's order; then the file itself.
  Checksum sum;
  auto feed = [&](auto&& write) {
    for (const auto& [part, bytes] : parts) {
      stream_file(part->path, bytes, write);
      if (part == &labels) write(pad.data(), pad.size());
    }
  };
  feed([&](const void* data, size_t n) { sum.update(data, n); });
  CacheHeader h{};
  std::memcpy(h.magic, kCacheMagic, sizeof h.magic);
  h.version = kCacheVersion;
  h.skip_bad_lines = skip_bad_lines ? 1 : 0;
  h.source_size = stamp.size;
  h.source_mtime_ns = stamp.mtime_ns;
  h.rows = rows;
  h.bad_lines = bad_lines;
  h.payload_bytes = static_cast<int64_t>(layout.total);
  h.checksum = sum.finish();
  h.source_hash = stamp.content_hash;
  AtomicFile file(cache, "CriteoDataset");
  file.write(&h, sizeof h);
  feed([&](const void* data, size_t n) { file.write(data, n); });
  file.commit();
}

}  // namespace

CriteoDataset CriteoDataset::over_cache(std::shared_ptr<const void> storage, const uint8_t* labels, const float* dense,
                                        const uint32_t* sparse, int64_t rows, int64_t bad_lines, std::string cache_path) {
  CriteoDataset ds;
  ds.labels_ = labels;
  ds.dense_ = dense;
  ds.sparse_ = sparse;
  ds.rows_ = rows;
  ds.bad_lines_ = bad_lines;
  ds.cache_reused_ = true;
  ds.cache_path_ = std::move(cache_path);
  ds.storage_ = std::move(storage);
  return ds;
}

CriteoDataset CriteoDataset::open(const std::string& tsv_path, const CriteoOpenOptions& options) {
  const SourceStamp stamp = source_stamp(tsv_path);
  if (!options.cache) return from_columns(parse_criteo_tsv(tsv_path, options.skip_bad_lines));
  const std::string cache = cache_path_for(tsv_path, options.cache_dir);
  if (::access(cache.c_str(), F_OK) == 0) {
    std::string problem;
    if (auto ds = map_cache(cache, stamp, options.skip_bad_lines, problem)) return std::move(*ds);
    std::cerr << "CriteoDataset: rebuilding the cache '" << cache << "' of '" << tsv_path << "': " << problem
              << std::endl;
  }
  std::string unwritable;
  try {
    if (!options.cache_dir.empty()) {
      std::error_code ignored;  // a folder that cannot be made fails the write below, which says so
      std::filesystem::create_directories(options.cache_dir, ignored);
    }
    build_cache(tsv_path, cache, stamp, options.skip_bad_lines, static_cast<size_t>(options.piece_bytes));
    std::string problem;
    if (auto ds = map_cache(cache, stamp, options.skip_bad_lines, problem)) {
      ds->cache_reused_ = false;
      return std::move(*ds);
    }
    unwritable = "the cache just written does not read back: " + problem;
  } catch (const Error& e) {
    // The TSV's own faults (a bad line, no valid line) are the answer; a cache that cannot be
    // written is not, and the rows are parsed into memory instead.
    if (std::string(e.what()).rfind("parse_criteo_tsv", 0) == 0) throw;
    unwritable = e.what();
  }
  std::cerr << "CriteoDataset: cannot write the cache (" << unwritable << "); the rows of '" << tsv_path
            << "' stay in memory" << std::endl;
  CriteoDataset ds = from_columns(parse_criteo_tsv(tsv_path, options.skip_bad_lines));
  ds.cache_path_ = cache;
  return ds;
}

CriteoRows::CriteoRows(CriteoDataset one) : CriteoRows(std::vector<CriteoDataset>{std::move(one)}) {}

CriteoRows::CriteoRows(std::vector<CriteoDataset> parts) : parts_(std::move(parts)), starts_{0} {
  FT_CHECK(!parts_.empty(), "CriteoRows: no dataset");
  for (const CriteoDataset& part : parts_) starts_.push_back(starts_.back() + part.rows());
}

std::pair<const CriteoDataset*, int64_t> CriteoRows::at(int64_t i) const {
  if (parts_.size() == 1) return {&parts_.front(), i};
  const auto next = std::upper_bound(starts_.begin(), starts_.end(), i);
  const size_t part = static_cast<size_t>(next - starts_.begin()) - 1;
  return {&parts_[part], i - starts_[part]};
}

const RowRange& CriteoSplit::range(const std::string& name) const {
  if (name == "train") return train;
  if (name == "test") return test;
  if (name == "val") return val;
  FT_FAIL("CriteoSplit: no split named '", name, "' (train, test or val)");
}

// facebookresearch/dlrm (data_utils.getCriteoAdData and transformCriteoAdData, the same in
// dlrm_data_pytorch.CriteoDataset) cuts the Kaggle file into 7 "days" with divmod(N, 7), the
// first N % 7 days one row longer, trains on the first 6 and splits the last with
// np.array_split(test_indices, 2): the first, larger half is test, the second val. Train is
// thus ceil(6N / 7) rows, one more than floor(6N / 7) unless 7 divides N.
CriteoSplit criteo_kaggle_split(int64_t rows) {
  FT_CHECK(rows >= 0, "criteo_kaggle_split: ", rows, " rows");
  const int64_t last_day = rows / 7, train = rows - last_day, test = (last_day + 1) / 2;
  return {{0, train}, {train, train + test}, {train + test, rows}};
}

CriteoBatchSource::CriteoBatchSource(CriteoRows data, RowRange range, std::vector<int64_t> table_rows,
                                     BatchSampler sampler)
    : data_(std::move(data)), range_(range), batches_(std::move(sampler)) {
  FT_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= data_.rows(), "CriteoBatchSource: rows [",
           range.begin, ", ", range.end, ") are not inside the dataset's ", data_.rows());
  FT_CHECK(batches_.sampler().dataset_size() == range.size(), "CriteoBatchSource: the sampler is over ",
           batches_.sampler().dataset_size(), " rows, the range holds ", range.size());
  FT_CHECK(table_rows.size() == kCriteoSparse, "CriteoBatchSource: ", table_rows.size(), " table sizes given, ",
           kCriteoSparse, " needed");
  for (size_t t = 0; t < table_rows.size(); ++t) {
    // An id must fit the i32 "sparse" tensor.
    FT_CHECK(table_rows[t] >= 1 && table_rows[t] <= (int64_t{1} << 31), "CriteoBatchSource: table ", t, " has ",
             table_rows[t], " rows; a table needs 1 to 2^31");
    table_rows_.push_back(static_cast<uint32_t>(table_rows[t]));
    modulo_magic_.push_back(modulo_magic(table_rows_.back()));
  }
}

void CriteoBatchSource::next_into(BatchWriter& out) {
  const Tensor ids = batches_.next_ids();
  const int64_t* id = ids.data<int64_t>();
  const int64_t n = ids.numel();
  auto* dense = static_cast<float*>(out.buffer("dense", {n, kCriteoDense}, DType::F32));
  auto* sparse = static_cast<int32_t*>(out.buffer("sparse", {n, kCriteoSparse}, DType::I32));
  auto* labels = static_cast<float*>(out.buffer("labels", {n}, DType::F32));
  // The rows are scattered over the mapped cache: each costs three cache misses, and one thread
  // gathering a batch is slower than the step it feeds. A thread per 2K rows, at most half the
  // cores: the training thread keeps the rest.
  const int threads = static_cast<int>(std::clamp<int64_t>(n >> 11, 1, std::max(1, omp_get_num_procs() / 2)));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = range_.begin + id[i];
    labels[i] = data_.label(row);
    std::memcpy(dense + i * kCriteoDense, data_.dense(row), kCriteoDense * sizeof(float));
    const uint32_t* src = data_.sparse(row);
    int32_t* dst = sparse + i * kCriteoSparse;
    for (int t = 0; t < kCriteoSparse; ++t)
      dst[t] = static_cast<int32_t>(fast_modulo(src[t], modulo_magic_[t], table_rows_[t]));
  }
}

DataPosition CriteoBatchSource::position() const { return batches_.position(); }

void CriteoBatchSource::set_position(const DataPosition& position) {
  batches_.set_position(position, "CriteoBatchSource");
}

}  // namespace ft
