// The reference for broadcasting in the elementwise tests: numpy's rule written out
// independently of the library's BroadcastPlan.
#pragma once
#include <algorithm>
#include <cstdint>

#include "lib/tensor.h"

namespace ft::test {

inline Shape broadcast_of(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    const int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Flat index into an operand of shape s for output element i of shape out.
inline int64_t operand_index(int64_t i, const Shape& out, const Shape& s) {
  int64_t index = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, k = static_cast<int64_t>(s.size()) - 1; d >= 0; --d, --k) {
    const int64_t coord = i % out[static_cast<size_t>(d)];
    i /= out[static_cast<size_t>(d)];
    if (k < 0) continue;
    const int64_t size = s[static_cast<size_t>(k)];
    if (size != 1) index += coord * stride;
    stride *= size;
  }
  return index;
}

/// Two operand shapes (or an input and the shape it expands to).
struct ShapePair {
  Shape a, b;
};

}  // namespace ft::test
