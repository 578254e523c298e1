// The Criteo files an ft-dlrm run reads, and where its train, test and validation rows lie:
// - one --data file: split as facebookresearch/dlrm splits Kaggle's (6/7 train; the last 1/7
//   halved into test, then validation);
// - several (Criteo 1TB's day_0 ... day_23): all but the last train, and the last is halved,
//   test its first half and validation the second, as MLPerf's reference splits day_23;
// - --test and --val files: held out apart from every --data file, which then all train.
// Each file is parsed once into a cache beside it (or in --cache-dir), piece by piece, and
// memory-mapped by later runs: no file has to fit in memory.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "examples/common/cli.h"
#include "lib/error.h"
#include "lib/launch_env.h"
#include "train/data/criteo.h"
#include "train/data/file_list.h"

namespace ft::dlrm {

struct CriteoFiles {
  std::string description;           ///< the files, for messages and the checkpoint's run state
  std::string held_out;              ///< the last held-out file (a synthetic one's .json sits beside it)
  CriteoRows rows;                   ///< every file, train's first
  CriteoSplit split;                 ///< ranges of `rows`
};

namespace detail {

/// What a pattern like day_* also matches beside the data: the caches, a synthetic file's info,
/// and the cache's pieces while it is written.
inline const std::vector<std::string> kNotData = {".ftcache", ".json", ".part"};

/// What opening the files did, for the summary line.
struct Opened {
  int64_t bad_lines = 0, parsed = 0, cached = 0;
  std::string str() const {
    if (parsed == 0) return cached == 1 ? "from its cache" : "from their caches";
    if (cached == 0) return "parsed";
    return std::to_string(parsed) + " files parsed, " + std::to_string(cached) + " from their caches";
  }
};

inline std::vector<CriteoDataset> open_files(const std::vector<std::string>& files, const cli::Args& args, bool primary,
                                             Opened& opened) {
  std::vector<CriteoDataset> out;
  for (const std::string& file : files) {
    out.push_back(CriteoDataset::open(
        file, {.skip_bad_lines = args.boolean("skip-bad-lines"), .cache_dir = args.str("cache-dir")}));
    opened.bad_lines += out.back().bad_lines();
    ++(out.back().cache_reused() ? opened.cached : opened.parsed);
    if (primary && files.size() > 1)
      std::printf("ft-dlrm: %s: %lld rows (%s)\n", file.c_str(), static_cast<long long>(out.back().rows()),
                  out.back().cache_reused() ? "from its cache" : "parsed");
  }
  return out;
}

inline int64_t rows_of(const std::vector<CriteoDataset>& parts) {
  int64_t n = 0;
  for (const CriteoDataset& p : parts) n += p.rows();
  return n;
}

inline std::string describe(const std::vector<std::string>& files) {
  return files.size() == 1 ? files.front()
                           : files.front() + " ... " + files.back() + " (" + std::to_string(files.size()) + " files)";
}

}  // namespace detail

inline CriteoFiles open_criteo_files(const cli::Args& args, int64_t batch) {
  FT_CHECK(!args.str("data").empty(), "ft-dlrm: give the training data with --data FILE (a Criteo TSV, or several: "
                                      "Criteo 1TB's day files), or write one with --make-synthetic FILE --rows N");
  const bool primary = launch_env().rank == 0;
  const std::vector<std::string> train = expand_file_list(args.str("data"), "ft-dlrm: --data", detail::kNotData);
  const std::string test_spec = args.str("test"), val_spec = args.str("val");
  detail::Opened opened;
  std::vector<CriteoDataset> parts = detail::open_files(train, args, primary, opened);
  CriteoFiles out{.description = detail::describe(train), .held_out = train.back(), .rows = CriteoRows(parts)};
  if (test_spec.empty() && val_spec.empty()) {
    if (train.size() == 1) {
      out.split = criteo_kaggle_split(parts.front().rows());
    } else {
      // The last file held out and halved: test first (the larger half), validation second.
      const int64_t begin = detail::rows_of(parts) - parts.back().rows(), end = detail::rows_of(parts);
      const int64_t test_end = begin + (parts.back().rows() + 1) / 2;
      out.split = {{0, begin}, {begin, test_end}, {test_end, end}};
    }
  } else {
    // Given apart: every --data file trains. One of --test and --val stands for both.
    const std::vector<std::string> test =
        expand_file_list(test_spec.empty() ? val_spec : test_spec, "ft-dlrm: --test", detail::kNotData);
    const std::vector<std::string> val =
        expand_file_list(val_spec.empty() ? test_spec : val_spec, "ft-dlrm: --val", detail::kNotData);
    const int64_t train_rows = detail::rows_of(parts);
    std::vector<CriteoDataset> test_parts = detail::open_files(test, args, primary, opened);
    parts.insert(parts.end(), test_parts.begin(), test_parts.end());
    const int64_t test_end = detail::rows_of(parts);
    int64_t val_begin = train_rows, val_end = test_end;  // the same files: the same rows
    if (val != test) {
      std::vector<CriteoDataset> val_parts = detail::open_files(val, args, primary, opened);
      parts.insert(parts.end(), val_parts.begin(), val_parts.end());
      val_begin = test_end;
      val_end = detail::rows_of(parts);
    }
    out.rows = CriteoRows(parts);
    out.split = {{0, train_rows}, {train_rows, test_end}, {val_begin, val_end}};
    out.description += ", test " + detail::describe(test) + ", val " + detail::describe(val);
    out.held_out = val.back();
  }
  const CriteoSplit& sp = out.split;
  if (primary)
    std::printf("ft-dlrm: %s: %lld rows (%s), train %lld, test %lld, val %lld%s\n", out.description.c_str(),
                static_cast<long long>(out.rows.rows()), opened.str().c_str(),
                static_cast<long long>(sp.train.size()), static_cast<long long>(sp.test.size()),
                static_cast<long long>(sp.val.size()),
                opened.bad_lines ? (", " + std::to_string(opened.bad_lines) + " bad lines skipped").c_str() : "");
  // Refused before training, not found empty when the run is over.
  FT_CHECK(sp.train.size() > 0 && sp.val.size() > 0 && sp.test.size() > 0, "ft-dlrm: ", out.description, " has ",
           out.rows.rows(), " rows, too few for dlrm's split (train ", sp.train.size(), ", test ", sp.test.size(),
           ", validation ", sp.val.size(), " rows); one file needs at least 14");
  FT_CHECK(batch <= sp.train.size(), "ft-dlrm: --batch must be in [1, ", sp.train.size(), "] (the training rows)");
  return out;
}

}  // namespace ft::dlrm
