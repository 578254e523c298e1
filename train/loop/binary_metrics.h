// Metrics of a binary classifier (a click model) over a whole evaluation set: the exact ROC AUC,
// log loss from logits, and accuracy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

/// The exact area under the ROC curve of `scores` for `labels` (each 0 or 1): the Mann-Whitney
/// U statistic over all (positive, negative) pairs, a tie counting one half. O(n log n). Sizes
/// that differ, a label other than 0 or 1, a NaN score, or labels of only one class are an
/// ft::Error.
double exact_auc(const std::vector<float>& scores, const std::vector<float>& labels);

struct BinaryMetrics {
  int64_t count = 0;           ///< predictions
  double positive_rate = 0;    ///< the share of labels that are 1
  double logloss = 0;          ///< mean binary cross-entropy
  double accuracy = 0;         ///< the share predicted right, a prediction being 1 when p > 0.5
  double auc = 0;              ///< exact_auc; NaN when it cannot be measured, auc_missing says why
  std::string auc_missing;     ///< empty, "the labels are all of one class" or "NaN scores"
};

/// Log loss, accuracy and AUC of the logits z (p = sigmoid(z)) against `labels` (0 or 1). The
/// loss is computed from z as softplus(z) - y·z, finite and exact where p would round to 0 or 1
/// in f32. AUC is NaN, and auc_missing says why, when the labels are all of one class or a score
/// is NaN (a diverged model): the other metrics are still reported. Empty inputs, lengths that
/// differ and labels other than 0 and 1 are errors.
BinaryMetrics binary_metrics_from_logits(const std::vector<float>& logits, const std::vector<float>& labels);

}  // namespace ft
