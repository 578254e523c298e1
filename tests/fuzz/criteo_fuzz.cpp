// Fuzz target: the Criteo TSV parser (train/data/criteo_tsv.h), strict and skipping bad lines. An
// accepted parse has N >= 1 rows of 1 + 13 + 26 values, labels 0 or 1 and dense values
// log(max(x, 0) + 1) (finite, not negative); skipping counts every line as a row or a bad line;
// and text the strict parser accepts reads the same with skipping on.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tests/fuzz/fuzz_check.h"
#include "train/data/criteo_tsv.h"

namespace {

using ft::fuzz::accepts;
using ft::fuzz::require;

void check(const ft::CriteoColumns& c) {
  const auto n = static_cast<size_t>(c.rows());
  require(n >= 1, "at least one row");
  require(c.dense.size() == n * ft::kCriteoDense && c.sparse.size() == n * ft::kCriteoSparse, "whole rows");
  require(std::all_of(c.labels.begin(), c.labels.end(), [](uint8_t l) { return l <= 1; }), "labels are 0 or 1");
  require(std::all_of(c.dense.begin(), c.dense.end(), [](float x) { return std::isfinite(x) && x >= 0; }),
          "dense values are log(max(x, 0) + 1)");
}

bool same(const ft::CriteoColumns& a, const ft::CriteoColumns& b) {
  // Bitwise for the floats: the same text must give the same bits.
  return a.labels == b.labels && a.sparse == b.sparse && a.dense.size() == b.dense.size() &&
         std::memcmp(a.dense.data(), b.dense.data(), a.dense.size() * sizeof(float)) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ft::CriteoColumns strict, skipping;
  const bool strict_ok = accepts([&] { strict = ft::parse_criteo_text(text, "fuzz.tsv"); });
  const bool skipping_ok = accepts([&] { skipping = ft::parse_criteo_text(text, "fuzz.tsv", true); });
  if (strict_ok) {
    check(strict);
    require(strict.bad_lines == 0, "a strict parse skips nothing");
    require(skipping_ok && skipping.bad_lines == 0 && same(strict, skipping), "skipping changes nothing on good text");
  }
  if (skipping_ok) {
    check(skipping);
    const int64_t lines = std::count(text.begin(), text.end(), '\n') + (text.back() != '\n');
    require(skipping.rows() + skipping.bad_lines == lines, "every line is a row or a bad line");
  }
  return 0;
}
