#include "train/distributed/sharding_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "lib/error.h"
#include "lib/parse.h"

namespace ft {

std::pair<int64_t, int64_t> ShardingPlan::row_block(int64_t rows, int world_size, int rank) {
  const int64_t base = rows / world_size, extra = rows % world_size;
  return {base * rank + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

int64_t ShardingPlan::rows_held(int64_t table_rows, size_t t, int rank) const {
  switch (tables[t].kind) {
    case TableSharding::Replicated: return table_rows;
    case TableSharding::TableWise: return tables[t].owner == rank ? table_rows : 0;
    case TableSharding::RowWise: return row_block(table_rows, world_size, rank).second;
  }
  return 0;
}

std::vector<double> ShardingPlan::bytes_per_rank(const std::vector<int64_t>& table_rows, double bytes_per_row) const {
  std::vector<double> bytes(static_cast<size_t>(world_size), 0.0);
  for (int r = 0; r < world_size; ++r)
    for (size_t t = 0; t < tables.size(); ++t)
      bytes[static_cast<size_t>(r)] += static_cast<double>(rows_held(table_rows[t], t, r)) * bytes_per_row;
  return bytes;
}

std::vector<size_t> ShardingPlan::tables_of(TableSharding kind, int owner) const {
  std::vector<size_t> out;
  for (size_t t = 0; t < tables.size(); ++t)
    if (tables[t].kind == kind && (owner < 0 || tables[t].owner == owner)) out.push_back(t);
  return out;
}

bool ShardingPlan::replicated() const { return tables_of(TableSharding::Replicated).size() == tables.size(); }

std::string ShardingPlan::describe(const std::vector<int64_t>& table_rows, double bytes_per_row) const {
  const auto list = [](const std::vector<size_t>& ts) {
    std::ostringstream s;
    for (size_t i = 0; i < ts.size(); ++i) s << (i ? "," : "") << ts[i];
    return ts.empty() ? std::string("none") : s.str();
  };
  std::ostringstream out;
  out << "row-wise: " << list(tables_of(TableSharding::RowWise))
      << "; replicated: " << list(tables_of(TableSharding::Replicated));
  const std::vector<double> bytes = bytes_per_rank(table_rows, bytes_per_row);
  for (int r = 0; r < world_size; ++r) {
    char gb[32];
    std::snprintf(gb, sizeof gb, "%.3f GB", bytes[static_cast<size_t>(r)] / 1e9);
    out << "\n  rank " << r << ": tables " << list(tables_of(TableSharding::TableWise, r)) << " whole, " << gb;
  }
  return out.str();
}

namespace {

/// Places `tables` whole, largest first, each on the rank with the fewest bytes so far (then the
/// fewest tables, then the lowest rank).
void place_whole(ShardingPlan& plan, std::vector<size_t> tables, const ShardingInputs& in, std::vector<double>& bytes) {
  std::vector<int> count(static_cast<size_t>(in.world_size), 0);
  for (size_t t = 0; t < plan.tables.size(); ++t)
    if (plan.tables[t].kind == TableSharding::TableWise) ++count[static_cast<size_t>(plan.tables[t].owner)];
  std::stable_sort(tables.begin(), tables.end(), [&](size_t a, size_t b) { return in.table_rows[a] > in.table_rows[b]; });
  for (size_t t : tables) {
    int best = 0;
    for (int r = 1; r < in.world_size; ++r) {
      const auto key = [&](int k) { return std::make_pair(bytes[static_cast<size_t>(k)], count[static_cast<size_t>(k)]); };
      if (key(r) < key(best)) best = r;
    }
    plan.tables[t] = {TableSharding::TableWise, best};
    bytes[static_cast<size_t>(best)] += static_cast<double>(in.table_rows[t]) * in.bytes_per_row;
    ++count[static_cast<size_t>(best)];
  }
}

ShardingPlan written_plan(const std::string& spec, const ShardingInputs& in) {
  ShardingPlan plan{in.world_size, {}};
  std::stringstream entries(spec);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    const size_t t = plan.tables.size();
    if (entry == "r") {
      plan.tables.push_back({TableSharding::RowWise, -1});
    } else if (entry == "d") {
      plan.tables.push_back({TableSharding::Replicated, -1});
    } else {
      const int64_t owner = parse_int64(entry, "sharding plan: table " + std::to_string(t) + "'s entry (a rank, r or d)");
      FT_CHECK(owner >= 0 && owner < in.world_size, "sharding plan: table ", t, " is placed on rank ", owner,
               ", outside the ", in.world_size, " ranks");
      plan.tables.push_back({TableSharding::TableWise, static_cast<int>(owner)});
    }
  }
  FT_CHECK(plan.tables.size() == in.table_rows.size(), "sharding plan: '", spec, "' places ", plan.tables.size(),
           " tables, the model has ", in.table_rows.size(),
           " (give auto, table, row, replicated, or one entry a table: a rank, r or d)");
  return plan;
}

}  // namespace

ShardingPlan plan_sharding(const std::string& spec, const ShardingInputs& in) {
  FT_CHECK(in.world_size >= 1 && !in.table_rows.empty(), "sharding plan: needs tables and at least one rank");
  const size_t tables = in.table_rows.size();
  ShardingPlan plan{in.world_size, std::vector<TablePlacement>(tables)};
  std::vector<double> bytes(static_cast<size_t>(in.world_size), 0.0);
  std::vector<size_t> all(tables);
  std::iota(all.begin(), all.end(), size_t{0});
  if (spec == "replicated") {
    // every table stays Replicated
  } else if (spec == "row") {
    for (TablePlacement& p : plan.tables) p = {TableSharding::RowWise, -1};
  } else if (spec == "table") {
    place_whole(plan, all, in, bytes);
  } else if (spec == "auto") {
    const double total = std::accumulate(in.table_rows.begin(), in.table_rows.end(), 0.0) * in.bytes_per_row;
    std::vector<size_t> whole;
    for (size_t t = 0; t < tables; ++t) {
      const double size = static_cast<double>(in.table_rows[t]) * in.bytes_per_row;
      if (in.world_size > 1 && size > total / in.world_size && in.table_rows[t] >= in.world_size) {
        plan.tables[t] = {TableSharding::RowWise, -1};
        for (int r = 0; r < in.world_size; ++r)
          bytes[static_cast<size_t>(r)] +=
              static_cast<double>(ShardingPlan::row_block(in.table_rows[t], in.world_size, r).second) * in.bytes_per_row;
      } else {
        whole.push_back(t);
      }
    }
    place_whole(plan, whole, in, bytes);
  } else {
    plan = written_plan(spec, in);
  }
  for (size_t t = 0; t < tables; ++t)
    FT_CHECK(plan.tables[t].kind != TableSharding::RowWise || in.table_rows[t] >= in.world_size, "sharding plan: table ",
             t, " has ", in.table_rows[t], " rows, fewer than the ", in.world_size,
             " ranks, so it cannot be split row-wise; place it whole");
  if (in.budget_per_rank > 0) {
    const std::vector<double> held = plan.bytes_per_rank(in.table_rows, in.bytes_per_row);
    for (int r = 0; r < in.world_size; ++r)
      FT_CHECK(held[static_cast<size_t>(r)] <= in.budget_per_rank, "sharding plan '", spec, "' does not fit: rank ", r,
               " would hold ", held[static_cast<size_t>(r)] / 1e9, " GB of tables, and has ", in.budget_per_rank / 1e9,
               " GB for them; use more ranks, --sharding auto or row, or smaller tables");
  }
  return plan;
}

}  // namespace ft
