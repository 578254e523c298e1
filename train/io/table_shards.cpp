#include "train/io/table_shards.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "lib/error.h"
#include "lib/parse.h"
#include "train/io/safetensors.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

std::string joined(const std::vector<int64_t>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

/// For messages: "26 tables of 500 rows", or the rows listed when they differ.
std::string rows_summary(const std::string& joined_rows) {
  std::vector<std::string> parts;
  std::stringstream in(joined_rows);
  std::string part;
  while (std::getline(in, part, ',')) parts.push_back(part);
  if (!parts.empty() && std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return p == parts[0]; }))
    return std::to_string(parts.size()) + " tables of " + parts[0] + " rows";
  return "tables of rows " + joined_rows;
}

const std::string& metadata_value(const std::map<std::string, std::string>& metadata, const std::string& key,
                                  const std::string& file) {
  const auto it = metadata.find(key);
  FT_CHECK(it != metadata.end(), "checkpoint tables: '", file, "' has no '", key, "' in its metadata");
  return it->second;
}

/// The folder's shard files, sorted.
std::vector<std::string> shard_files(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("tables-") && name.ends_with(".safetensors")) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string table_shard_file(int rank) { return "tables-" + std::to_string(rank) + ".safetensors"; }

void write_table_shard(const std::string& path, const std::vector<TableRows>& parts,
                       const std::vector<int64_t>& table_rows, int64_t dim, int shard, int shards) {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata{{"table_rows", joined(table_rows)},
                                              {"dim", std::to_string(dim)},
                                              {"shard", std::to_string(shard)},
                                              {"shards", std::to_string(shards)}};
  for (const TableRows& part : parts) {
    const std::string t = std::to_string(part.table);
    tensors[t + ".weight"] = part.weight;
    if (part.accumulator.defined()) tensors[t + ".accumulator"] = part.accumulator;
    metadata[t + ".first_row"] = std::to_string(part.first);
  }
  save_safetensors(path, tensors, metadata);
}

StoredTables::StoredTables(const std::string& folder, const std::string& prefix, std::vector<int64_t> table_rows,
                           int64_t dim)
    : folder_(folder), table_rows_(std::move(table_rows)), dim_(dim), pieces_(table_rows_.size()) {
  const std::vector<std::string> files = shard_files(folder);
  sharded_ = !files.empty();
  const std::string rows_text = joined(table_rows_);
  if (!sharded_) {
    // One process's tables, stacked in the model's file.
    const std::string file = (fs::path(folder) / "model.safetensors").string();
    const SafetensorsHeader header = load_safetensors_header(file);
    const SafetensorsEntry* weight = nullptr;
    const SafetensorsEntry* accumulator = nullptr;
    for (const SafetensorsEntry& e : header.tensors) {
      if (e.name == prefix + "weight") weight = &e;
      if (e.name == prefix + "accumulator") accumulator = &e;
    }
    FT_CHECK(weight, "checkpoint tables: '", folder, "' holds neither tables-*.safetensors nor '", prefix,
             "weight' in model.safetensors");
    int64_t total = 0;
    for (int64_t r : table_rows_) total += r;
    FT_CHECK(weight->shape == (std::vector<int64_t>{total, dim_}), "checkpoint tables: '", folder, "' holds tables of ",
             shape_str(weight->shape), " rows x width, this run's are [", total, ", ", dim_, "] (",
             rows_summary(rows_text), ")");
    int64_t at = 0;
    for (size_t t = 0; t < table_rows_.size(); ++t) {
      pieces_[t].push_back({file, prefix + "weight", accumulator ? prefix + "accumulator" : "", 0, table_rows_[t], at,
                            accumulator && accumulator->shape.size() == 2});
      at += table_rows_[t];
    }
    return;
  }
  for (const std::string& file : files) {
    const SafetensorsHeader header = load_safetensors_header(file);
    const std::string& stored_rows = metadata_value(header.metadata, "table_rows", file);
    FT_CHECK(stored_rows == rows_text && metadata_value(header.metadata, "dim", file) == std::to_string(dim_),
             "checkpoint tables: '", file, "' holds ", rows_summary(stored_rows), " of width ",
             metadata_value(header.metadata, "dim", file), "; this run has ", rows_summary(rows_text), " of width ",
             dim_);
    const int64_t shards = parse_int64(metadata_value(header.metadata, "shards", file), "checkpoint tables: shards");
    FT_CHECK(shards == static_cast<int64_t>(files.size()), "checkpoint tables: '", folder, "' holds ", files.size(),
             " of the ", shards, " table files its run wrote");
    for (const SafetensorsEntry& e : header.tensors) {
      if (!e.name.ends_with(".weight")) continue;
      const std::string t_text = e.name.substr(0, e.name.size() - 7);
      const int64_t t = parse_int64(t_text, "checkpoint tables: a table number in '" + file + "'");
      FT_CHECK(t >= 0 && t < static_cast<int64_t>(table_rows_.size()) && e.shape.size() == 2 && e.shape[1] == dim_ &&
                   e.dtype == DType::F32,
               "checkpoint tables: '", file, "' holds '", e.name, "' ", shape_str(e.shape), ", not rows of one of the ",
               table_rows_.size(), " tables of width ", dim_);
      const int64_t first =
          parse_int64(metadata_value(header.metadata, t_text + ".first_row", file), "checkpoint tables: first row");
      FT_CHECK(first >= 0 && first + e.shape[0] <= table_rows_[static_cast<size_t>(t)], "checkpoint tables: '", file,
               "' holds rows [", first, ", ", first + e.shape[0], ") of table ", t, ", which has ",
               table_rows_[static_cast<size_t>(t)]);
      const auto accumulator = std::find_if(header.tensors.begin(), header.tensors.end(),
                                            [&](const SafetensorsEntry& a) { return a.name == t_text + ".accumulator"; });
      const bool stored = accumulator != header.tensors.end();
      pieces_[static_cast<size_t>(t)].push_back({file, e.name, stored ? t_text + ".accumulator" : "", first, e.shape[0], 0,
                                                 stored && accumulator->shape.size() == 2});
    }
  }
}

bool StoredTables::has_accumulators() const {
  for (const std::vector<Piece>& table : pieces_)
    for (const Piece& p : table)
      if (p.accumulator_name.empty()) return false;
  return true;
}

bool StoredTables::elementwise_accumulators() const {
  return !pieces_.empty() && !pieces_[0].empty() && pieces_[0][0].elementwise;
}

std::optional<std::pair<std::vector<int64_t>, int64_t>> StoredTables::sharded_shape(const std::string& folder) {
  const std::vector<std::string> files = shard_files(folder);
  if (files.empty()) return std::nullopt;
  const SafetensorsHeader header = load_safetensors_header(files.front());
  std::vector<int64_t> rows;
  std::stringstream text(metadata_value(header.metadata, "table_rows", files.front()));
  std::string part;
  while (std::getline(text, part, ',')) rows.push_back(parse_int64(part, "checkpoint tables: table_rows"));
  return std::make_pair(rows, parse_int64(metadata_value(header.metadata, "dim", files.front()), "checkpoint tables: dim"));
}

void StoredTables::read(size_t t, int64_t first, int64_t count, const Tensor& weight, const Tensor& accumulator) const {
  FT_CHECK(t < pieces_.size() && first >= 0 && first + count <= table_rows_[t], "checkpoint tables: rows [", first,
           ", ", first + count, ") of table ", t, " do not exist");
  int64_t covered = 0;
  for (const Piece& p : pieces_[t]) {
    const int64_t lo = std::max(first, p.first), hi = std::min(first + count, p.first + p.rows);
    if (lo >= hi) continue;
    const int64_t from = p.at + lo - p.first;
    weight.narrow(0, lo - first, hi - lo).copy_(load_safetensors_rows(p.file, p.weight_name, from, hi - lo));
    if (accumulator.defined()) {
      FT_CHECK(!p.accumulator_name.empty(), "checkpoint tables: '", folder_, "' has no Adagrad accumulators for table ",
               t, " (its run did not use Adagrad on the tables)");
      const bool elementwise = accumulator.dim() == 2;
      FT_CHECK(p.elementwise == elementwise, "checkpoint tables: '", folder_, "' holds ",
               p.elementwise ? "element-wise" : "row-wise", " Adagrad accumulators for table ", t, ", this run keeps ",
               elementwise ? "element-wise" : "row-wise", " ones");
      accumulator.narrow(0, lo - first, hi - lo).copy_(load_safetensors_rows(p.file, p.accumulator_name, from, hi - lo));
    }
    covered += hi - lo;
  }
  FT_CHECK(covered == count, "checkpoint tables: '", folder_, "' holds ", covered, " of rows [", first, ", ",
           first + count, ") of table ", t);
}

}  // namespace ft
