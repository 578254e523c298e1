// How fast parse_criteo_tsv reads a Criteo TSV on one core: the parse alone (mapping, line count,
// fields, log(x + 1)), with no cache written. Times a synthetic file of about --mb megabytes made
// in a temporary folder, or --file; prints the best and the median of --runs runs.
//
//   ft-criteo-parse-bench [--mb 300] [--runs 3] [--file train.txt]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/error.h"
#include "tests/train/temp_dir.h"
#include "train/data/criteo.h"
#include "train/data/criteo_synthetic.h"

namespace {

constexpr double kBytesPerRow = 252;  // a synthetic line's average length, measured

int run(int argc, char** argv) {
  double mb = 300;
  int runs = 3;
  std::string file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    FT_CHECK(i + 1 < argc, "ft-criteo-parse-bench: ", arg, " needs a value");
    if (arg == "--mb") mb = std::atof(argv[++i]);
    else if (arg == "--runs") runs = std::atoi(argv[++i]);
    else if (arg == "--file") file = argv[++i];
    else FT_FAIL("ft-criteo-parse-bench: unknown flag ", arg, " (--mb N, --runs N, --file PATH)");
  }
  FT_CHECK(mb > 0 && runs > 0, "ft-criteo-parse-bench: --mb and --runs must be positive");
  ft::test::TempDir dir("ft_criteo_bench");
  if (file.empty()) {
    file = dir.file("synthetic.tsv");
    const auto start = std::chrono::steady_clock::now();
    const ft::SyntheticCriteoInfo info =
        ft::write_synthetic_criteo(file, {.rows = static_cast<int64_t>(mb * 1e6 / kBytesPerRow), .seed = 1});
    std::printf("generated %s in %.1f s: click rate %.4f, best AUC %.4f (test split %.4f)\n", file.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), info.positive_rate,
                info.best_auc, info.best_test_auc);
  }
  const double bytes = static_cast<double>(std::filesystem::file_size(file));
  std::vector<double> seconds;
  int64_t rows = 0;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const ft::CriteoColumns columns = ft::parse_criteo_tsv(file, true);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    rows = columns.rows();
    std::printf("run %d: %.3f s, %ld rows, %ld bad lines\n", r + 1, seconds.back(), static_cast<long>(rows),
                static_cast<long>(columns.bad_lines));
  }
  std::sort(seconds.begin(), seconds.end());
  const double best = seconds.front(), median = seconds[seconds.size() / 2];
  std::printf("parse_criteo_tsv: %.1f MB, %ld rows | best %.0f MB/s %.2fM rows/s | median %.0f MB/s %.2fM rows/s\n",
              bytes / 1e6, static_cast<long>(rows), bytes / 1e6 / best, rows / 1e6 / best, bytes / 1e6 / median,
              rows / 1e6 / median);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
