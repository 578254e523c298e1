#include "train/loop/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lib/error.h"

namespace ft {

namespace {

void check_inputs(const char* op, const std::vector<float>& scores, const std::vector<float>& labels,
                  bool nan_scores_allowed = false) {
  FT_CHECK(scores.size() == labels.size(), op, ": ", scores.size(), " scores but ", labels.size(), " labels");
  for (size_t i = 0; i < labels.size(); ++i) {
    FT_CHECK(labels[i] == 0.0f || labels[i] == 1.0f, op, ": label ", labels[i], " at ", i, " is not 0 or 1");
    FT_CHECK(nan_scores_allowed || !std::isnan(scores[i]), op, ": score ", i, " is NaN");
  }
}

// The AUC of inputs check_inputs passed; NaN when the labels are all of one class.
double auc_of_checked(const std::vector<float>& scores, const std::vector<float>& labels) {
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Walking up the scores, each positive beats every negative below its tie group and half of
  // those inside it. The counts are integers and halves, exact in a double below 2^52 pairs.
  double wins = 0, negatives_below = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    double pos = 0, neg = 0;
    size_t j = i;
    for (; j < order.size() && scores[order[j]] == scores[order[i]]; ++j) (labels[order[j]] == 1.0f ? pos : neg) += 1;
    wins += pos * negatives_below + 0.5 * pos * neg;
    negatives_below += neg;
    positives += pos;
    i = j;
  }
  return positives > 0 && negatives_below > 0 ? wins / (positives * negatives_below) : std::nan("");
}

}  // namespace

double exact_auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  check_inputs("exact_auc", scores, labels);
  const double auc = auc_of_checked(scores, labels);
  FT_CHECK(!std::isnan(auc), "exact_auc: the ", scores.size(), " labels are all of one class; AUC needs both");
  return auc;
}

BinaryMetrics binary_metrics_from_logits(const std::vector<float>& logits, const std::vector<float>& labels) {
  check_inputs("binary metrics", logits, labels, /*nan_scores_allowed=*/true);
  FT_CHECK(!logits.empty(), "binary metrics: no predictions to measure (an empty split)");
  BinaryMetrics m;
  // What cannot be measured is NaN and named, never an error that throws the run's result away:
  // AUC needs scores that are numbers (a diverged model's are not) and both classes.
  const bool nan_score = std::any_of(logits.begin(), logits.end(), [](float z) { return std::isnan(z); });
  m.auc = nan_score ? std::nan("") : auc_of_checked(logits, labels);
  m.auc_missing = nan_score ? "NaN scores" : std::isnan(m.auc) ? "the labels are all of one class" : "";
  m.count = static_cast<int64_t>(logits.size());
  double loss = 0, right = 0, positives = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double z = logits[i], y = labels[i];
    // -log sigmoid(z) for y = 1, -log(1 - sigmoid(z)) for y = 0, with no exp that can overflow.
    loss += std::max(z, 0.0) - y * z + std::log1p(std::exp(-std::abs(z)));
    right += (z > 0) == (y == 1.0);
    positives += y;
  }
  m.positive_rate = positives / static_cast<double>(m.count);
  m.logloss = loss / static_cast<double>(m.count);
  m.accuracy = right / static_cast<double>(m.count);
  return m;
}

}  // namespace ft
