// ft-dlrm's presets and the run's sizes: every flag left empty takes its preset's value, and
// every flag is checked here, before any data is read.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/training_flags.h"
#include "lib/error.h"
#include "lib/ops/embedding_bag/embedding_bag.h"
#include "lib/parse.h"
#include "models/dlrm/dlrm.h"
#include "train/data/criteo_tsv.h"

namespace ft::dlrm {

/// A preset's sizes and optimizers. table_rows: one count for every table, or 26.
struct Preset {
  int64_t dim, batch;
  std::string table_rows, bottom, top, optimizer, lr, sparse_optimizer, sparse_lr;
};

/// MLPerf DLRMv2's 26 tables on Criteo 1TB (ids capped at 40M a table): 187.8M rows.
inline const char* kCriteo1TbRows =
    "39884406,39043,17289,7420,20263,3,7120,1543,63,38532951,2953546,403346,10,2208,11938,155,4,976,14,39979771,"
    "25641295,39664984,585935,12972,108,36";

inline Preset preset_named(const std::string& name) {
  // kaggle: dlrm's Kaggle recipe, but row-wise Adagrad lr 0.2 on the tables instead of its SGD
  // 0.1, which left the DLRM below a logistic regression on data with interactions (one epoch on
  // a 400k-row synthetic file: test AUC 0.7899 with SGD, 0.8024 with Adagrad, the logistic
  // regression 0.7968, the best 0.8190: docs/history/performance-log.md); bench: docs/workloads.md's dlrm-kaggle; mlperf:
  // dlrm-mlperf; criteo1tb: MLPerf DLRMv2's tables and MLPs (the dot interaction) with exact
  // Adagrad on them.
  if (name == "kaggle") return {16, 128, "1000000", "512-256-64-16", "512-256-1", "sgd", "0.1", "adagrad", "0.2"};
  if (name == "bench") return {64, 8192, "100000", "512-256-64", "512-256-1", "adamw", "1e-3", "sgd", "0.01"};
  if (name == "mlperf")
    return {128, 65536, "1000000", "512-256-128", "1024-1024-512-256-1", "adamw", "1e-3", "sgd", "0.01"};
  if (name == "criteo1tb")
    return {128,     65536,  kCriteo1TbRows,        "512-256-128", "1024-1024-512-256-1",
            "adamw", "1e-3", "elementwise-adagrad", "0.01"};
  FT_FAIL("ft-dlrm: --preset must be kaggle, bench, mlperf or criteo1tb, got '", name, "'");
}

/// "N" (every table) or 26 comma-separated counts, each in [1, 2^31]; `max_ind_range` > 0 caps
/// each (facebookresearch/dlrm's --max-ind-range).
inline std::vector<int64_t> parse_table_rows(const std::string& text, int64_t max_ind_range) {
  std::vector<int64_t> rows;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) rows.push_back(parse_int64(part, "ft-dlrm: --table-rows"));
  if (rows.size() == 1) rows.assign(kCriteoSparse, rows.front());
  FT_CHECK(rows.size() == kCriteoSparse, "ft-dlrm: --table-rows must be one count or ", kCriteoSparse,
           " comma-separated ones, got ", rows.size());
  for (int64_t& r : rows) {
    FT_CHECK(r >= 1 && r <= (int64_t{1} << 31), "ft-dlrm: --table-rows: a table needs 1 to 2^31 rows, got ", r);
    if (max_ind_range > 0) r = std::min(r, max_ind_range);
  }
  return rows;
}

/// "26 tables of 100000" when the counts are equal, else "26 tables (187767399 rows)".
inline std::string describe_tables(const std::vector<int64_t>& rows) {
  const bool equal = std::all_of(rows.begin(), rows.end(), [&](int64_t r) { return r == rows.front(); });
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  return equal ? "26 tables of " + std::to_string(rows.front()) : "26 tables (" + std::to_string(total) + " rows)";
}

/// --preset's help: every preset's values, from the table above (so help and presets agree).
inline std::string preset_help() {
  std::string help = "the flags left empty take the preset's values:";
  for (const char* name : {"kaggle", "bench", "mlperf", "criteo1tb"}) {
    const Preset p = preset_named(name);
    const std::vector<int64_t> rows = parse_table_rows(p.table_rows, 0);
    // The tables' f32 weights alone.
    const double table_gb =
        static_cast<double>(std::accumulate(rows.begin(), rows.end(), int64_t{0})) * static_cast<double>(p.dim) * 4 / 1e9;
    const std::string table_rows = p.table_rows == kCriteo1TbRows ? "MLPerf DLRMv2's 26 counts" : p.table_rows;
    char line[400];
    std::snprintf(line, sizeof line,
                  "\n%s: --dim %lld --bottom %s --top %s --table-rows %s (%.2f GB of tables) --batch %lld\n"
                  "  --optimizer %s --lr %s --sparse-optimizer %s --sparse-lr %s",
                  name, static_cast<long long>(p.dim), p.bottom.c_str(), p.top.c_str(), table_rows.c_str(), table_gb,
                  static_cast<long long>(p.batch), p.optimizer.c_str(), p.lr.c_str(), p.sparse_optimizer.c_str(),
                  p.sparse_lr.c_str());
    help += line;
  }
  return help + "\n(kaggle: dlrm's Kaggle recipe; bench: docs/workloads.md's dlrm-kaggle; mlperf: dlrm-mlperf;\n"
                "criteo1tb: MLPerf DLRMv2 on Criteo 1TB: 96 GB of tables, twice that with element-wise Adagrad)";
}

/// "512-256-1" as widths; every width positive.
inline std::vector<int64_t> widths(const std::string& flag, const std::string& text) {
  FT_CHECK(!text.empty() && text.front() != '-' && text.back() != '-', "ft-dlrm: --", flag,
           " must be widths joined by '-', like 512-256-1, got '", text, "'");
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, '-')) {
    char* end = nullptr;
    const long long w = std::strtoll(part.c_str(), &end, 10);
    FT_CHECK(!part.empty() && *end == '\0' && w > 0, "ft-dlrm: --", flag,
             " must be widths joined by '-', like 512-256-1, got '", text, "'");
    out.push_back(w);
  }
  FT_CHECK(!out.empty(), "ft-dlrm: --", flag, " is empty");
  return out;
}

inline std::string or_preset(const cli::Args& args, const std::string& flag, const std::string& preset_value) {
  const std::string v = args.str(flag);
  return v.empty() ? preset_value : v;
}

/// The model's and the run's sizes: the preset's, or the flags' where given.
struct Settings {
  int64_t dim, batch;
  std::vector<int64_t> table_rows;  ///< 26 counts, capped by --max-ind-range
  double sparse_lr;
  std::vector<int64_t> bottom, top;
  std::string optimizer, lr;  // the preset's when the flags are empty
  BagMode pooling;
  RowUpdateKind sparse_update;
  std::string sharding;
  bool cross = false;  ///< --interaction dcn
  int64_t cross_rank = 512, cross_layers = 3;
};

inline int64_t preset_integer(const cli::Args& args, const std::string& flag, int64_t preset_value) {
  const int64_t x = parse_int64(or_preset(args, flag, std::to_string(preset_value)), "ft-dlrm: --" + flag);
  FT_CHECK(x > 0, "ft-dlrm: --", flag, " must be positive, got ", x);
  return x;
}

inline RowUpdateKind sparse_update_named(const std::string& name) {
  if (name == "sgd") return RowUpdateKind::SGD;
  if (name == "adagrad") return RowUpdateKind::RowWiseAdagrad;
  if (name == "elementwise-adagrad") return RowUpdateKind::ElementwiseAdagrad;
  FT_FAIL("ft-dlrm: --sparse-optimizer must be sgd, adagrad or elementwise-adagrad, got '", name, "'");
}

/// Every flag is checked here, before any data is read.
inline Settings check_flags(const cli::Args& args, const Preset& preset) {
  cli::check_training_flags(args, "ft-dlrm");
  for (const char* name : {"epochs", "eval-every", "eval-batches"}) (void)args.integer(name, 0);
  (void)args.boolean("skip-bad-lines");
  FT_CHECK(!args.boolean("eval-only") || !args.str("resume").empty(),
           "ft-dlrm: --eval-only evaluates a checkpoint: give it with --resume");
  const int64_t max_ind_range = args.integer("max-ind-range", 0);
  FT_CHECK(max_ind_range >= 0, "ft-dlrm: --max-ind-range must not be negative (0: no cap), got ", max_ind_range);
  Settings s{.dim = preset_integer(args, "dim", preset.dim),
             .batch = preset_integer(args, "batch", preset.batch),
             .table_rows = parse_table_rows(or_preset(args, "table-rows", preset.table_rows), max_ind_range)};
  s.sparse_lr = parse_double(or_preset(args, "sparse-lr", preset.sparse_lr), "ft-dlrm: --sparse-lr");
  FT_CHECK(s.sparse_lr >= 0, "ft-dlrm: --sparse-lr must not be negative, got ", s.sparse_lr);
  s.optimizer = or_preset(args, "optimizer", preset.optimizer);
  s.lr = or_preset(args, "lr", preset.lr);
  const std::string pooling = args.str("pooling");
  FT_CHECK(pooling == "sum" || pooling == "mean", "ft-dlrm: --pooling must be sum or mean, got '", pooling, "'");
  s.pooling = pooling == "mean" ? BagMode::Mean : BagMode::Sum;
  s.sparse_update = sparse_update_named(or_preset(args, "sparse-optimizer", preset.sparse_optimizer));
  s.sharding = args.str("sharding");
  const std::string interaction = args.str("interaction");
  FT_CHECK(interaction == "dot" || interaction == "dcn", "ft-dlrm: --interaction must be dot or dcn, got '",
           interaction, "'");
  s.cross = interaction == "dcn";
  s.cross_rank = args.integer("dcn-rank", 1);
  s.cross_layers = args.integer("dcn-layers", 1);
  s.bottom = widths("bottom", or_preset(args, "bottom", preset.bottom));
  s.top = widths("top", or_preset(args, "top", preset.top));
  FT_CHECK(s.bottom.back() == s.dim, "ft-dlrm: --bottom must end at --dim ", s.dim,
           " (the dense features join the tables' vectors in the interaction), it ends at ", s.bottom.back());
  FT_CHECK(s.top.back() == 1, "ft-dlrm: --top must end at 1 (the click logit), it ends at ", s.top.back());
  return s;
}

/// Bytes of one table row: its f32 values and its f32 Adagrad accumulators (one, or one a value).
inline double table_row_bytes(const Settings& s) {
  const double values = static_cast<double>(s.dim) * 4;
  if (s.sparse_update == RowUpdateKind::RowWiseAdagrad) return values + 4;
  return s.sparse_update == RowUpdateKind::ElementwiseAdagrad ? 2 * values : values;
}

inline DLRM::Interaction interaction(const Settings& s) {
  return s.cross ? DLRM::Interaction::Cross : DLRM::Interaction::Dot;
}

/// Every table's rows in all.
inline int64_t total_rows(const Settings& s) {
  return std::accumulate(s.table_rows.begin(), s.table_rows.end(), int64_t{0});
}

}  // namespace ft::dlrm
