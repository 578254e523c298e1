#include "train/data/criteo_tsv.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "lib/error.h"

namespace ft {

namespace {

constexpr int kFields = 1 + kCriteoDense + kCriteoSparse;

enum class Fault : uint8_t { Label, NotInteger, IntegerRange, NotHex, HexTooLong };

struct LineFault {
  int field = 0;  // 0 the label, 1..13 I1..I13, 14..39 C1..C26
  Fault fault = Fault::Label;
};

constexpr std::array<uint8_t, 256> make_hex_table() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = 0xFF;
  for (int c = 0; c < 10; ++c) t['0' + c] = static_cast<uint8_t>(c);
  for (int c = 0; c < 6; ++c) t['a' + c] = t['A' + c] = static_cast<uint8_t>(10 + c);
  return t;
}
constexpr std::array<uint8_t, 256> kHex = make_hex_table();

// Criteo's counts are mostly small: a table of log(x + 1) for them spares a logf per value. It is
// filled at run time: as a static, GCC would fold it at compile time with correctly rounded
// values, and a few would then differ by an ulp from the logf that larger counts get.
constexpr int kLogTable = 4096;
std::vector<float> log1p_table() {
  std::vector<float> t(kLogTable);
  for (int x = 0; x < kLogTable; ++x) t[static_cast<size_t>(x)] = std::log(static_cast<float>(x) + 1.0f);
  return t;
}

// Whether the decimal digits [b, e) (more than 18 of them) fit in int64 (magnitude 2^63 when
// negative), compared as text so nothing can overflow.
bool fits_int64(const char* b, const char* e, bool negative) {
  while (b < e && *b == '0') ++b;
  const std::string_view limit = negative ? "9223372036854775808" : "9223372036854775807";
  const auto n = static_cast<size_t>(e - b);
  return n < limit.size() || (n == limit.size() && std::string_view(b, n) <= limit);
}

// Parses the line at `p` into one row. Every loop stops at the line's '\n', which must follow
// somewhere, so no field needs a bounds check. Returns the next line's start, or nullptr with
// `fault` naming the first field that is wrong.
const char* parse_line(const char* p, const float* log_table, uint8_t* label, float* dense, uint32_t* sparse,
                       LineFault& fault) {
  if ((p[0] != '0' && p[0] != '1') || p[1] != '\t') {
    fault = {0, Fault::Label};
    return nullptr;
  }
  *label = static_cast<uint8_t>(p[0] - '0');
  p += 2;
  for (int j = 0; j < kCriteoDense; ++j) {
    const bool negative = *p == '-';
    const char* digits = p + negative;
    const char* q = digits;
    uint64_t v = 0;
    while (static_cast<unsigned>(*q - '0') < 10u) v = v * 10 + static_cast<unsigned>(*q++ - '0');
    if (*q != '\t' || (negative && q == digits)) {
      fault = {1 + j, Fault::NotInteger};
      return nullptr;
    }
    if (q - digits > 18 && !fits_int64(digits, q, negative)) {
      fault = {1 + j, Fault::IntegerRange};
      return nullptr;
    }
    // dlrm clamps negative counts to 0 before log(x + 1); a missing one reads as 0 too.
    dense[j] = negative ? 0.0f : v < kLogTable ? log_table[v] : std::log(static_cast<float>(v) + 1.0f);
    p = q + 1;
  }
  for (int j = 0;; ++j) {
    const char* q = p;
    uint32_t v = 0;
    for (uint8_t d; (d = kHex[static_cast<uint8_t>(*q)]) < 16; ++q) v = (v << 4) | d;
    if (q - p > 8) {
      fault = {1 + kCriteoDense + j, Fault::HexTooLong};
      return nullptr;
    }
    sparse[j] = v;
    if (j == kCriteoSparse - 1) {
      if (*q == '\n') return q + 1;
      if (*q == '\r' && q[1] == '\n') return q + 2;
    } else if (*q == '\t') {
      p = q + 1;
      continue;
    }
    fault = {1 + kCriteoDense + j, Fault::NotHex};
    return nullptr;
  }
}

std::string field_name(int field) {
  if (field == 0) return "the label";
  if (field <= kCriteoDense) return "I" + std::to_string(field);
  return "C" + std::to_string(field - kCriteoDense);
}

// What is wrong with the line [b, e) (e at its '\n'). A wrong field count is reported first:
// a missing tab shifts every later field, so their own faults would mislead.
std::string describe_fault(const std::string& path, int64_t line, const char* b, const char* e, LineFault fault) {
  if (e > b && e[-1] == '\r') --e;
  const std::string where = "parse_criteo_tsv: '" + path + "' line " + std::to_string(line) + ": ";
  const int64_t fields = 1 + std::count(b, e, '\t');
  if (fields != kFields)
    return where + "expected " + std::to_string(kFields) + " tab-separated fields, found " + std::to_string(fields);
  const char* f = b;
  for (int i = 0; i < fault.field; ++i) f = std::find(f, e, '\t') + 1;
  const std::string text(f, std::min<const char*>(std::find(f, e, '\t'), f + 40));
  const std::string field = field_name(fault.field) + " '" + text + "'";
  switch (fault.fault) {
    case Fault::Label: return where + field + " is not 0 or 1";
    case Fault::NotInteger: return where + field + " is not a decimal integer";
    case Fault::IntegerRange: return where + field + " does not fit in int64";
    case Fault::NotHex: return where + field + " is not hexadecimal";
    case Fault::HexTooLong: return where + field + " has more than 8 hex digits";
  }
  return where + field + " is malformed";
}

}  // namespace

CriteoColumns parse_criteo_text(std::string_view text, const std::string& path, bool skip_bad_lines) {
  FT_CHECK(!text.empty(), "parse_criteo_tsv: '", path, "' is empty");
  CriteoColumns out = parse_criteo_lines(text, path, skip_bad_lines, 1);
  FT_CHECK(out.rows() > 0, "parse_criteo_tsv: '", path, "' has no valid line (", out.bad_lines,
           " malformed lines skipped)");
  return out;
}

CriteoColumns parse_criteo_lines(std::string_view text, const std::string& path, bool skip_bad_lines,
                                 int64_t first_line) {
  if (text.empty()) return {};
  const char* begin = text.data();
  const char* end = begin + text.size();
  int64_t lines = 0;
  for (const char* p = begin; (p = static_cast<const char*>(std::memchr(p, '\n', end - p))) != nullptr; ++p) ++lines;
  // A last line with no '\n' is parsed from a copy that has one, so the parser's loops can stop
  // at '\n' and never check bounds.
  const char* body_end = end;
  std::string tail;
  if (end[-1] != '\n') {
    ++lines;
    const auto* last = static_cast<const char*>(::memrchr(begin, '\n', text.size()));
    body_end = last == nullptr ? begin : last + 1;
    tail.assign(body_end, end);
    tail += '\n';
  }
  CriteoColumns out;
  out.labels.resize(static_cast<size_t>(lines));
  out.dense.resize(static_cast<size_t>(lines) * kCriteoDense);
  out.sparse.resize(static_cast<size_t>(lines) * kCriteoSparse);
  const std::vector<float> log_table = log1p_table();
  int64_t row = 0, line = first_line - 1;
  auto parse_region = [&](const char* p, const char* region_end) {
    while (p < region_end) {
      ++line;
      LineFault fault;
      const char* next = parse_line(p, log_table.data(), &out.labels[static_cast<size_t>(row)],
                                    &out.dense[static_cast<size_t>(row) * kCriteoDense],
                                    &out.sparse[static_cast<size_t>(row) * kCriteoSparse], fault);
      if (next != nullptr) {
        ++row;
        p = next;
        continue;
      }
      const auto* line_end = static_cast<const char*>(std::memchr(p, '\n', region_end - p));
      if (!skip_bad_lines) FT_FAIL(describe_fault(path, line, p, line_end, fault));
      ++out.bad_lines;
      p = line_end + 1;
    }
  };
  parse_region(begin, body_end);
  parse_region(tail.data(), tail.data() + tail.size());
  out.labels.resize(static_cast<size_t>(row));
  out.dense.resize(static_cast<size_t>(row) * kCriteoDense);
  out.sparse.resize(static_cast<size_t>(row) * kCriteoSparse);
  return out;
}

}  // namespace ft
