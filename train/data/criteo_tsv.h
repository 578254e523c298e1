// The Criteo Kaggle TSV format and its parser, on bytes in memory: train/data/criteo.h maps the file
// and caches the columns; kept apart so that the parser runs without a file or the tensor
// library (its fuzz target links neither).
//
// N: rows. A line is `label \t I1..I13 \t C1..C26`: 40 tab-separated fields, the label 0 or 1,
// I* decimal integers, C* 32-bit hex values (8 digits in the real data, either letter case); an
// empty I* or C* field is missing. As in facebookresearch/dlrm, a dense value is stored as
// log(max(x, 0) + 1) in f32 (missing reads as 0) and a categorical one as its u32 value (missing
// reads as 0). The modulo by an embedding table's row count is taken when batches are made, so
// one parse serves every table size.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

constexpr int kCriteoDense = 13;
constexpr int kCriteoSparse = 26;

/// The parsed columns of a Criteo TSV: row i's label, its 13 dense and its 26 sparse values.
struct CriteoColumns {
  std::vector<uint8_t> labels;   // [N], 0 or 1
  std::vector<float> dense;      // [N, 13]
  std::vector<uint32_t> sparse;  // [N, 26]
  int64_t bad_lines = 0;         // lines skipped (skip_bad_lines only)
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

/// Parses `text`, the contents of the TSV `path`. A line with a wrong field count, a label other
/// than 0 or 1, an integer that is not one or does not fit int64, or a categorical that is not
/// hex or is longer than 8 digits is an ft::Error naming the file, the 1-based line and the
/// fault; with skip_bad_lines such lines are skipped and counted instead. LF and CRLF both end a
/// line, and the last line needs no line end. Empty text, or text with no valid line, is an
/// ft::Error naming the file.
CriteoColumns parse_criteo_text(std::string_view text, const std::string& path, bool skip_bad_lines = false);
/// The same for a piece of a file, whose first line is line `first_line` of the file (for the
/// messages): empty text, or text of bad lines only, gives no rows instead of an error.
CriteoColumns parse_criteo_lines(std::string_view text, const std::string& path, bool skip_bad_lines,
                                 int64_t first_line);

}  // namespace ft
