// Synthetic Criteo Kaggle TSV files whose labels a DLRM can learn, with the best AUC any model
// can reach on them, so a training run has a target to compare against.
//
// Labels come from a hidden logistic model over what a DLRM sees: each categorical feature
// draws from a vocabulary of 10 to 100 random 32-bit values with Zipf-like frequencies (or is
// missing; with full_range_ids, an id Zipf-like over the table's whole range instead), and
// every hashed id (value % table_rows[t]) has a hidden weight; dense features
// are heavy-tailed counts (a few negative, some missing) with hidden weights on log(max(x, 0)
// + 1); two pairs of categorical features add the dot product of small hidden vectors of their
// ids, which a DLRM's dot interaction can capture. The logits are scaled to a chosen spread and
// shifted to a chosen click rate. The vocabularies are small enough for a small DLRM to learn
// from a million rows: D 8 comes within about 0.01 AUC of the best in two epochs
// (tests/train/dlrm_auc_check.sh).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

struct SyntheticCriteoOptions {
  int64_t rows = 100000;
  uint64_t seed = 0;
  std::vector<int64_t> table_rows = {100000};  ///< 26 row counts, or one for every table
  double positive_rate = 0.25;                 ///< the click rate the bias is tuned to
  double logit_std = 1.5;                      ///< the hidden logits' spread: larger is easier
  /// Criteo 1TB's shape: each categorical value is an id drawn Zipf-like across its table's
  /// whole range (every id its own hidden weight, from a hash), not from a small vocabulary.
  bool full_range_ids = false;
  /// Which of several files of one hidden model (the seed's) this is: day k draws its own rows.
  uint64_t day = 0;
  /// best_test_auc over the first half of the rows (MLPerf's test half of a held-out day)
  /// instead of criteo_kaggle_split's test rows.
  bool test_first_half = false;
};

struct SyntheticCriteoInfo {
  int64_t rows = 0;
  uint64_t seed = 0;
  std::vector<int64_t> table_rows;  ///< 26 row counts
  double positive_rate = 0;         ///< the share of drawn labels that are 1
  double best_auc = 0;              ///< exact AUC of the true click probabilities, all rows
  double best_test_auc = 0;         ///< the same over criteo_kaggle_split(rows).test
  std::vector<float> true_logits;   ///< [rows] logit of each row's true click probability (not in the JSON)
};

/// Writes `options.rows` lines of a valid Criteo TSV to `path` and its info to `path + ".json"`,
/// both atomically. The same options give the same bytes. Fewer than 2 rows, a table count other
/// than 1 or 26, or a table size outside [1, 2^31] is an ft::Error.
SyntheticCriteoInfo write_synthetic_criteo(const std::string& path, const SyntheticCriteoOptions& options);

/// Reads the info that write_synthetic_criteo wrote beside `path` (`path + ".json"`), without
/// true_logits. A missing or malformed file is an ft::Error naming it.
SyntheticCriteoInfo read_synthetic_criteo_info(const std::string& path);

}  // namespace ft
