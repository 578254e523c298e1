// How far two runs' tensors are apart, as the equivalence checks measure it: max|a - b| over
// max|b| (the absolute difference when b is all zeros).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "lib/error.h"

namespace ft::test {

inline double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  FT_CHECK(a.size() == b.size(), "relative_difference: ", a.size(), " values against ", b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace ft::test
