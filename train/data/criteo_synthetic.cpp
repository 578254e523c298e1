#include "train/data/criteo_synthetic.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "lib/error.h"
#include "train/data/criteo.h"
#include "train/io/atomic_file.h"
#include "train/io/text_file.h"
#include "train/io/json.h"
#include "train/loop/binary_metrics.h"

namespace ft {

namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr int kPairDim = 4;  // the hidden vectors of an interacting pair
constexpr const char* kFormat = "fusedtrain synthetic criteo";
constexpr int64_t kFormatVersion = 1;

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

double box_muller(double u, double v) { return std::sqrt(-2.0 * std::log(1.0 - u)) * std::cos(kTwoPi * v); }

// mt19937_64 with the conversions written out: the standard leaves the algorithms of
// std::uniform_real_distribution and std::normal_distribution to each library, and one seed must
// give the same file under any of them.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double uniform() { return unit(engine_()); }
  double normal() {
    const double u = uniform();
    return box_muller(u, uniform());
  }
  uint64_t bits() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// A normal value fixed by a key: the hidden parameters of a hashed id are computed when needed,
// so no table of table_rows entries is built.
double keyed_normal(uint64_t key) { return box_muller(unit(mix64(key)), unit(mix64(key ^ 0x632BE59BD9B4E019ull))); }

struct Categorical {
  std::vector<uint32_t> values;  // the vocabulary (empty with full-range ids)
  std::vector<double> cdf;       // Zipf-like frequencies, cumulative, the last one 1
  double missing = 0;            // P(empty field)
  double zipf = 1, scale = 1;    // the frequencies' exponent, the weights' spread
  uint64_t rows = 1, key = 0;    // full-range ids: the table's rows, the hidden parameters' key
  // Per vocabulary entry, and one more for a missing value (which a model sees as 0): the weight
  // of its hashed id and its hidden vector (used when the feature is in a pair).
  std::vector<double> weight;
  std::vector<std::array<double, kPairDim>> vec;
};

struct DenseFeature {
  double missing, negative, mu, sigma, weight;
};

struct HiddenModel {
  bool full_range = false;
  std::array<Categorical, kCriteoSparse> cats;
  std::array<DenseFeature, kCriteoDense> dense;
  std::array<std::pair<int, int>, 2> pairs;
};

// An id's hidden vector for the interacting pairs, from its key.
std::array<double, kPairDim> keyed_vector(uint64_t key) {
  std::array<double, kPairDim> v;
  for (int d = 0; d < kPairDim; ++d) v[d] = keyed_normal(key ^ (static_cast<uint64_t>(d + 1) << 48));
  return v;
}

uint64_t id_key(uint64_t key_base, int t, uint64_t id) { return key_base ^ (static_cast<uint64_t>(t) << 56) ^ id; }

HiddenModel draw_model(uint64_t seed, const std::vector<int64_t>& table_rows, bool full_range) {
  Rng rng(mix64(seed ^ 0x1));
  const uint64_t key_base = mix64(seed ^ 0x2);
  HiddenModel m;
  m.full_range = full_range;
  for (int t = 0; t < kCriteoSparse; ++t) {
    Categorical& c = m.cats[t];
    if (full_range) {
      // Zipf-like over the whole table: a popular head the model can learn, a long tail it cannot.
      c.zipf = 1.05 + 0.2 * rng.uniform();
      c.scale = 0.1 + 0.4 * rng.uniform();
      c.missing = rng.uniform() < 0.3 ? 0.05 + 0.45 * rng.uniform() : 0.02 * rng.uniform();
      c.rows = static_cast<uint64_t>(table_rows[t]);
      c.key = key_base;
      continue;
    }
    // 10 to 100 values, so that even the rarest is seen about 500 times in a million rows and its
    // weight can be learned: with 100 to 3000 (the rarest seen some 70 times), a DLRM stayed 0.03
    // to 0.05 AUC short of the best, and PyTorch's dlrm on the same files did no better.
    const auto vocab = static_cast<size_t>(std::lround(std::exp(std::log(10.0) + rng.uniform() * std::log(10.0))));
    const double zipf = 0.8 + 0.4 * rng.uniform(), scale = 0.1 + 0.4 * rng.uniform();
    c.missing = rng.uniform() < 0.3 ? 0.05 + 0.45 * rng.uniform() : 0.02 * rng.uniform();
    double total = 0;
    for (size_t k = 0; k < vocab; ++k) {
      c.values.push_back(static_cast<uint32_t>(rng.bits()));
      c.cdf.push_back(total += std::pow(static_cast<double>(k + 1), -zipf));
    }
    for (double& p : c.cdf) p /= total;
    for (size_t k = 0; k <= vocab; ++k) {
      const uint64_t id = k < vocab ? c.values[k] % static_cast<uint64_t>(table_rows[t]) : 0;
      const uint64_t key = id_key(key_base, t, id);
      c.weight.push_back(scale * keyed_normal(key));
      c.vec.push_back(keyed_vector(key));
    }
  }
  for (int j = 0; j < kCriteoDense; ++j) {
    DenseFeature& d = m.dense[j];
    d.missing = rng.uniform() < 0.3 ? 0.1 + 0.4 * rng.uniform() : 0.02 * rng.uniform();
    d.negative = j == 1 ? 0.03 : 0.0;  // like Criteo's I2, the one column with -1, -2, -3
    d.mu = 4.0 * rng.uniform();
    d.sigma = 0.5 + 1.5 * rng.uniform();
    d.weight = 0.3 * rng.normal();
  }
  std::array<int, kCriteoSparse> order;
  for (int t = 0; t < kCriteoSparse; ++t) order[t] = t;
  for (int i = kCriteoSparse - 1; i > 0; --i) std::swap(order[i], order[rng.bits() % static_cast<uint64_t>(i + 1)]);
  m.pairs = {{{order[0], order[1]}, {order[2], order[3]}}};
  return m;
}

// One drawn row: the TSV's values and the hidden logit before scale and shift.
struct Row {
  std::array<int64_t, kCriteoDense> dense;
  std::array<bool, kCriteoDense> dense_missing;
  std::array<uint32_t, kCriteoSparse> cat;
  std::array<bool, kCriteoSparse> cat_missing;
  double logit;
};

/// A full-range id of table c: rank k drawn Zipf-like over [1, rows] (the inverse of a
/// continuous power law), then scattered over the table by a hash, so the popular ids are not
/// the first rows.
uint64_t full_range_id(const Categorical& c, int t, double u) {
  const double n = static_cast<double>(c.rows) + 1, a = 1.0 - c.zipf;  // zipf > 1: a < 0
  const double k = std::pow((std::pow(n, a) - 1.0) * u + 1.0, 1.0 / a);
  const auto rank = static_cast<uint64_t>(std::min(std::max(k, 1.0), n - 1));
  return mix64(rank ^ (static_cast<uint64_t>(t + 1) << 40) ^ c.key) % c.rows;
}

void draw_row(const HiddenModel& m, Rng& rng, Row& row) {
  double logit = 0;
  std::array<size_t, kCriteoSparse> entry;
  std::array<std::array<double, kPairDim>, kCriteoSparse> full_vec;  // full-range ids' vectors
  for (int t = 0; t < kCriteoSparse; ++t) {
    const Categorical& c = m.cats[t];
    row.cat_missing[t] = rng.uniform() < c.missing;
    const double u = rng.uniform();
    if (m.full_range) {
      const uint64_t id = row.cat_missing[t] ? 0 : full_range_id(c, t, u);
      row.cat[t] = static_cast<uint32_t>(id);  // below the table's rows: hashing keeps it
      const uint64_t key = id_key(c.key, t, id);
      logit += c.scale * keyed_normal(key);
      full_vec[t] = keyed_vector(key);
      continue;
    }
    const auto drawn = std::upper_bound(c.cdf.begin(), c.cdf.end() - 1, u);
    entry[t] = row.cat_missing[t] ? c.values.size() : static_cast<size_t>(drawn - c.cdf.begin());
    row.cat[t] = row.cat_missing[t] ? 0 : c.values[entry[t]];
    logit += c.weight[entry[t]];
  }
  for (const auto& [a, b] : m.pairs) {
    const auto& u = m.full_range ? full_vec[a] : m.cats[a].vec[entry[a]];
    const auto& v = m.full_range ? full_vec[b] : m.cats[b].vec[entry[b]];
    double dot = 0;
    for (int d = 0; d < kPairDim; ++d) dot += u[d] * v[d];
    logit += 0.3 * dot;
  }
  for (int j = 0; j < kCriteoDense; ++j) {
    const DenseFeature& d = m.dense[j];
    const double u = rng.uniform(), z = rng.normal();
    row.dense_missing[j] = u < d.missing;
    if (row.dense_missing[j]) {
      row.dense[j] = 0;  // what a model sees
    } else if (u < d.missing + d.negative) {
      row.dense[j] = -1 - static_cast<int64_t>(3.0 * rng.uniform());
    } else {
      row.dense[j] = static_cast<int64_t>(std::min(std::max(std::exp(d.mu + d.sigma * z) - 1.0, 0.0), 1e9));
    }
    logit += d.weight * std::log1p(static_cast<double>(std::max<int64_t>(row.dense[j], 0)));
  }
  row.logit = logit;
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// The scale and shift that give the hidden logits of a pilot sample (drawn apart from the
// file's rows) the wanted spread and mean click probability.
std::pair<double, double> calibrate(const HiddenModel& m, uint64_t seed, double logit_std, double positive_rate) {
  Rng rng(mix64(seed ^ 0x3));
  std::vector<double> logits(20000);
  Row row;
  for (double& z : logits) {
    draw_row(m, rng, row);
    z = row.logit;
  }
  double mean = 0, var = 0;
  for (double z : logits) mean += z / static_cast<double>(logits.size());
  for (double z : logits) var += (z - mean) * (z - mean) / static_cast<double>(logits.size());
  const double scale = logit_std / std::sqrt(var);
  double lo = -30, hi = 30;
  for (int i = 0; i < 60; ++i) {
    const double shift = (lo + hi) / 2;
    double rate = 0;
    for (double z : logits) rate += sigmoid(scale * (z - mean) + shift);
    (rate / static_cast<double>(logits.size()) < positive_rate ? lo : hi) = shift;
  }
  return {scale, (lo + hi) / 2 - scale * mean};
}

char* write_decimal(char* p, int64_t x) { return std::to_chars(p, p + 24, x).ptr; }

char* write_hex8(char* p, uint32_t x) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int s = 28; s >= 0; s -= 4) *p++ = kDigits[(x >> s) & 0xF];
  return p;
}

// AUC of the true logits over rows [begin, end); NaN when those labels hold one class only.
double best_auc(const std::vector<float>& logits, const std::vector<float>& labels, int64_t begin, int64_t end) {
  const std::vector<float> z(logits.begin() + begin, logits.begin() + end);
  const std::vector<float> y(labels.begin() + begin, labels.begin() + end);
  const auto positives = std::count(y.begin(), y.end(), 1.0f);
  if (positives == 0 || positives == static_cast<int64_t>(y.size())) return std::numeric_limits<double>::quiet_NaN();
  return exact_auc(z, y);
}

std::string json_number_or_null(double x) { return std::isnan(x) ? "null" : json_number(x); }

}  // namespace

SyntheticCriteoInfo write_synthetic_criteo(const std::string& path, const SyntheticCriteoOptions& options) {
  FT_CHECK(options.rows >= 2, "write_synthetic_criteo: needs at least 2 rows, got ", options.rows);
  FT_CHECK(options.table_rows.size() == 1 || options.table_rows.size() == kCriteoSparse,
           "write_synthetic_criteo: give 1 or ", kCriteoSparse, " table sizes, not ", options.table_rows.size());
  FT_CHECK(options.positive_rate > 0 && options.positive_rate < 1 && options.logit_std > 0,
           "write_synthetic_criteo: positive_rate must be in (0, 1) and logit_std positive, got ",
           options.positive_rate, " and ", options.logit_std);
  SyntheticCriteoInfo info;
  info.rows = options.rows;
  info.seed = options.seed;
  info.table_rows = options.table_rows.size() == 1 ? std::vector<int64_t>(kCriteoSparse, options.table_rows[0])
                                                   : options.table_rows;
  for (int64_t n : info.table_rows)
    FT_CHECK(n >= 1 && n <= (int64_t{1} << 31), "write_synthetic_criteo: table size ", n, " is outside [1, 2^31]");

  const HiddenModel model = draw_model(options.seed, info.table_rows, options.full_range_ids);
  const auto [scale, shift] = calibrate(model, options.seed, options.logit_std, options.positive_rate);
  Rng rng(mix64(options.seed ^ 0x4 ^ (options.day << 32)));
  AtomicFile file(path, "write_synthetic_criteo");
  std::vector<char> chunk(1 << 23);
  char* p = chunk.data();
  std::vector<float> labels(static_cast<size_t>(options.rows));
  info.true_logits.resize(labels.size());
  Row row;
  int64_t positives = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    draw_row(model, rng, row);
    const double z = scale * row.logit + shift;
    const bool click = rng.uniform() < sigmoid(z);
    labels[i] = click ? 1.0f : 0.0f;
    info.true_logits[i] = static_cast<float>(z);
    positives += click;
    if (chunk.data() + chunk.size() - p < 512) {  // a line is at most 2 + 13·20 + 26·9 + 14 bytes
      file.write(chunk.data(), static_cast<size_t>(p - chunk.data()));
      p = chunk.data();
    }
    *p++ = click ? '1' : '0';
    for (int j = 0; j < kCriteoDense; ++j) {
      *p++ = '\t';
      if (!row.dense_missing[j]) p = write_decimal(p, row.dense[j]);
    }
    for (int t = 0; t < kCriteoSparse; ++t) {
      *p++ = '\t';
      if (!row.cat_missing[t]) p = write_hex8(p, row.cat[t]);
    }
    *p++ = '\n';
  }
  file.write(chunk.data(), static_cast<size_t>(p - chunk.data()));
  file.commit();

  info.positive_rate = static_cast<double>(positives) / static_cast<double>(options.rows);
  info.best_auc = best_auc(info.true_logits, labels, 0, options.rows);
  const RowRange test =
      options.test_first_half ? RowRange{0, (options.rows + 1) / 2} : criteo_kaggle_split(options.rows).test;
  info.best_test_auc = best_auc(info.true_logits, labels, test.begin, test.end);

  std::string tables;
  for (int64_t n : info.table_rows) tables += (tables.empty() ? "" : ", ") + std::to_string(n);
  write_file_atomically(path + ".json",
                        "{\n  \"format\": " + json_quote(kFormat) + ",\n  \"version\": " +
                            std::to_string(kFormatVersion) + ",\n  \"rows\": " + std::to_string(info.rows) +
                            ",\n  \"seed\": \"" + std::to_string(info.seed) + "\",\n  \"table_rows\": [" + tables +
                            "],\n  \"positive_rate\": " + json_number(info.positive_rate) +
                            ",\n  \"best_auc\": " + json_number_or_null(info.best_auc) +
                            ",\n  \"best_test_auc\": " + json_number_or_null(info.best_test_auc) + "\n}\n",
                        "write_synthetic_criteo");
  return info;
}

SyntheticCriteoInfo read_synthetic_criteo_info(const std::string& path) {
  const std::string json_path = path + ".json";
  const std::string op = "read_synthetic_criteo_info: '" + json_path + "'";
  const JsonValue doc = parse_json(read_text_file(json_path, "read_synthetic_criteo_info"), op);
  auto field = [&](const char* name, JsonValue::Kind kind) -> const JsonValue& {
    const JsonValue* v = doc.find(name);
    FT_CHECK(v != nullptr, op, ": no \"", name, "\"");
    const bool number = kind == JsonValue::Kind::Number && (v->is_number() || v->kind == JsonValue::Kind::Null);
    FT_CHECK(v->kind == kind || number, op, ": \"", name, "\" has the wrong type");
    return *v;
  };
  auto number = [&](const char* name) {
    const JsonValue& v = field(name, JsonValue::Kind::Number);
    return v.kind == JsonValue::Kind::Null ? std::numeric_limits<double>::quiet_NaN() : v.number;
  };
  FT_CHECK(field("format", JsonValue::Kind::String).text == kFormat, op, ": not a synthetic Criteo info file");
  FT_CHECK(field("version", JsonValue::Kind::Integer).integer == kFormatVersion, op, ": format version ",
           field("version", JsonValue::Kind::Integer).integer, ", expected ", kFormatVersion);
  SyntheticCriteoInfo info;
  info.rows = field("rows", JsonValue::Kind::Integer).integer;
  const std::string& seed = field("seed", JsonValue::Kind::String).text;
  uint64_t parsed_seed = 0;
  const auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), parsed_seed);
  FT_CHECK(ec == std::errc() && end == seed.data() + seed.size(), op, ": seed '", seed, "' is not a uint64");
  info.seed = parsed_seed;
  for (const JsonValue& n : field("table_rows", JsonValue::Kind::Array).items) {
    FT_CHECK(n.kind == JsonValue::Kind::Integer, op, ": \"table_rows\" holds a non-integer");
    info.table_rows.push_back(n.integer);
  }
  FT_CHECK(info.table_rows.size() == kCriteoSparse, op, ": \"table_rows\" has ", info.table_rows.size(),
           " entries, expected ", kCriteoSparse);
  info.positive_rate = number("positive_rate");
  info.best_auc = number("best_auc");
  info.best_test_auc = number("best_test_auc");
  return info;
}

}  // namespace ft
