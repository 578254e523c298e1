#include "train/distributed/sharded_tables.h"

#include <optional>
#include <utility>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/row_block/row_block.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "train/distributed/collective_ops.h"

namespace ft {

namespace {

Tensor i64_tensor(const std::vector<int64_t>& values, Device device) {
  std::vector<double> v(values.begin(), values.end());
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::I64).to(device);
}

/// Where table t sits in `tables` (which holds it).
int64_t position_in(const std::vector<size_t>& tables, size_t t) {
  for (size_t i = 0; i < tables.size(); ++i)
    if (tables[i] == t) return static_cast<int64_t>(i);
  FT_FAIL("ShardedEmbeddingBags: table ", t, " is not in its group");
}

}  // namespace

ShardedEmbeddingBags::ShardedEmbeddingBags(EmbeddingBagCollection::Options options, ShardingPlan plan, int rank,
                                           Generator& gen)
    : options_(std::move(options)), plan_(std::move(plan)), rank_(rank) {
  const size_t tables = options_.table_rows.size();
  FT_CHECK(plan_.tables.size() == tables, "ShardedEmbeddingBags: the plan places ", plan_.tables.size(),
           " tables, the options hold ", tables);
  FT_CHECK(rank >= 0 && rank < plan_.world_size, "ShardedEmbeddingBags: rank ", rank, " is outside the plan's ",
           plan_.world_size, " ranks");
  FT_CHECK(options_.dim > 0, "ShardedEmbeddingBags: D must be positive");
  // Each table's generator offset, as EmbeddingBagCollection(options, gen) takes them in turn.
  std::vector<uint64_t> offset(tables);
  for (size_t t = 0; t < tables; ++t) {
    FT_CHECK(options_.table_rows[t] > 0, "ShardedEmbeddingBags: table ", t, " has no rows");
    offset[t] = gen.advance(static_cast<uint64_t>(options_.table_rows[t] * options_.dim));
  }
  owned_by_.resize(static_cast<size_t>(plan_.world_size));
  for (size_t t = 0; t < tables; ++t) {
    const TablePlacement& p = plan_.tables[t];
    if (p.kind == TableSharding::TableWise) owned_by_[static_cast<size_t>(p.owner)].push_back(t);
    if (p.kind == TableSharding::RowWise) row_wise_.push_back(t);
    if (p.kind == TableSharding::Replicated) replicated_.push_back(t);
  }
  // One collection per kind, holding this rank's rows of its tables, drawn where they sit.
  const auto build = [&](const std::vector<size_t>& group, const std::string& name,
                         bool rank_local) -> std::shared_ptr<EmbeddingBagCollection> {
    if (group.empty()) return nullptr;
    EmbeddingBagCollection::Options o = options_;
    o.table_rows.clear();
    std::vector<TableRowsToDraw> pieces;
    for (size_t t : group) {
      const Held h = held(t);
      o.table_rows.push_back(h.rows);
      pieces.push_back({.rows = options_.table_rows[t], .first = h.first, .count = h.rows, .offset = offset[t]});
    }
    const Tensor weight = EmbeddingBagCollection::draw_rows(pieces, options_.dim, gen.seed(), options_.device);
    auto collection = register_module(name, std::make_shared<EmbeddingBagCollection>(o, weight));
    if (rank_local) collection->set_rank_local();
    return collection;
  };
  owned_ = build(owned_by_[static_cast<size_t>(rank_)], "owned", true);
  row_blocks_ = build(row_wise_, "row_blocks", true);
  replicas_ = build(replicated_, "replicated", false);
}

ShardedEmbeddingBags::Held ShardedEmbeddingBags::held(size_t t) const {
  FT_CHECK(t < plan_.tables.size(), "ShardedEmbeddingBags: no table ", t);
  const TablePlacement& p = plan_.tables[t];
  const int64_t rows = options_.table_rows[t];
  Held h;
  if (p.kind == TableSharding::TableWise && p.owner != rank_) return h;
  if (p.kind == TableSharding::RowWise) {
    const auto [first, count] = ShardingPlan::row_block(rows, plan_.world_size, rank_);
    h.first = first;
    h.rows = count;
  } else {
    h.rows = rows;
  }
  // Rows before t's in its collection.
  const std::vector<size_t>& group = p.kind == TableSharding::TableWise ? owned_by_[static_cast<size_t>(rank_)]
                                     : p.kind == TableSharding::RowWise ? row_wise_
                                                                        : replicated_;
  for (size_t u : group) {
    if (u == t) break;
    h.at += p.kind == TableSharding::RowWise ? ShardingPlan::row_block(options_.table_rows[u], plan_.world_size, rank_).second
                                             : options_.table_rows[u];
  }
  return h;
}

EmbeddingBagCollection* ShardedEmbeddingBags::collection_of(size_t t) const {
  switch (plan_.tables[t].kind) {
    case TableSharding::TableWise: return plan_.tables[t].owner == rank_ ? owned_.get() : nullptr;
    case TableSharding::RowWise: return row_blocks_.get();
    case TableSharding::Replicated: return replicas_.get();
  }
  return nullptr;
}

Tensor ShardedEmbeddingBags::weight_of(size_t t) const {
  const Held h = held(t);
  EmbeddingBagCollection* c = collection_of(t);
  return c ? c->weight().narrow(0, h.at, h.rows) : Tensor();
}

Tensor ShardedEmbeddingBags::accumulator_of(size_t t) const {
  const Held h = held(t);
  EmbeddingBagCollection* c = collection_of(t);
  return c && c->accumulator().defined() ? c->accumulator().narrow(0, h.at, h.rows) : Tensor();
}

std::vector<TableRows> ShardedEmbeddingBags::rows_to_save() const {
  std::vector<TableRows> out;
  for (size_t t = 0; t < plan_.tables.size(); ++t) {
    if (plan_.tables[t].kind == TableSharding::Replicated && rank_ != 0) continue;
    const Held h = held(t);
    if (h.rows > 0) out.push_back({t, h.first, weight_of(t), accumulator_of(t)});
  }
  return out;
}

void load_stored_tables(PooledTables& tables, const StoredTables& stored) {
  NoGradGuard no_grad;
  if (auto* sharded = dynamic_cast<ShardedEmbeddingBags*>(&tables)) {
    for (size_t t = 0; t < static_cast<size_t>(sharded->tables()); ++t) {
      const ShardedEmbeddingBags::Held h = sharded->held(t);
      if (h.rows > 0) stored.read(t, h.first, h.rows, sharded->weight_of(t), sharded->accumulator_of(t));
    }
    return;
  }
  auto& whole = dynamic_cast<EmbeddingBagCollection&>(tables);
  const Tensor& accumulator = whole.accumulator();
  int64_t at = 0;
  for (size_t t = 0; t < whole.options().table_rows.size(); ++t) {
    const int64_t rows = whole.options().table_rows[t];
    stored.read(t, 0, rows, whole.weight().narrow(0, at, rows),
                accumulator.defined() ? accumulator.narrow(0, at, rows) : Tensor());
    at += rows;
  }
}

void ShardedEmbeddingBags::set_exchange(std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> exchange) {
  if (replicas_) replicas_->set_exchange(std::move(exchange));
}

const ShardedEmbeddingBags::Indices& ShardedEmbeddingBags::indices(int64_t batch, Device device) {
  const auto known = indices_.find({batch, device});
  if (known != indices_.end()) return known->second;
  const int64_t tables = this->tables(), world = plan_.world_size;
  std::vector<int64_t> send, block, replica, assemble(static_cast<size_t>(batch * tables));
  for (const std::vector<size_t>& group : owned_by_)
    for (int64_t b = 0; b < batch; ++b)
      for (size_t t : group) send.push_back(b * tables + static_cast<int64_t>(t));
  for (int64_t b = 0; b < batch; ++b) {
    for (size_t t : row_wise_) block.push_back(b * tables + static_cast<int64_t>(t));
    for (size_t t : replicated_) replica.push_back(b * tables + static_cast<int64_t>(t));
  }
  // The joined pooled rows: the table-wise ones as they come back (owner, sample, table), then
  // the row-wise ones (sample, table), then the replicated ones (sample, table).
  std::vector<int64_t> owner_base(static_cast<size_t>(world) + 1, 0);
  for (size_t o = 0; o < owned_by_.size(); ++o)
    owner_base[o + 1] = owner_base[o] + batch * static_cast<int64_t>(owned_by_[o].size());
  const int64_t row_wise_base = owner_base.back();
  const int64_t replicated_base = row_wise_base + batch * static_cast<int64_t>(row_wise_.size());
  for (int64_t b = 0; b < batch; ++b)
    for (size_t t = 0; t < static_cast<size_t>(tables); ++t) {
      const TablePlacement& p = plan_.tables[t];
      int64_t at = 0;
      if (p.kind == TableSharding::TableWise) {
        const std::vector<size_t>& group = owned_by_[static_cast<size_t>(p.owner)];
        at = owner_base[static_cast<size_t>(p.owner)] + b * static_cast<int64_t>(group.size()) + position_in(group, t);
      } else if (p.kind == TableSharding::RowWise) {
        at = row_wise_base + b * static_cast<int64_t>(row_wise_.size()) + position_in(row_wise_, t);
      } else {
        at = replicated_base + b * static_cast<int64_t>(replicated_.size()) + position_in(replicated_, t);
      }
      assemble[static_cast<size_t>(b * tables) + t] = at;
    }
  return indices_[{batch, device}] = {
              .send_ids = i64_tensor(send, device),
              .block_ids = i64_tensor(block, device),
              .replica_ids = i64_tensor(replica, device),
              .bag_offsets = Tensor::arange(world * batch * static_cast<int64_t>(row_wise_.size()) + 1, DType::I64, device),
              .assemble = RowPermutation::of(assemble, device)};
}

Tensor ShardedEmbeddingBags::pooled_table_wise(const Tensor& ids, int64_t batch, DType out_dtype,
                                               std::unique_ptr<Work>* in_flight) {
  const int64_t world = plan_.world_size;
  std::vector<int64_t> send_ids, recv_ids, send_rows, recv_rows;
  const int64_t mine = static_cast<int64_t>(owned_by_[static_cast<size_t>(rank_)].size());
  for (const std::vector<size_t>& group : owned_by_) {
    send_ids.push_back(batch * static_cast<int64_t>(group.size()));  // my samples' ids of its tables
    recv_ids.push_back(batch * mine);                                // its samples' ids of mine
  }
  const Tensor outgoing = gather_rows(ids.reshape({ids.numel(), 1}), indices(batch, ids.device()).send_ids);
  const Tensor incoming = all_to_all_rows(*comm_, outgoing.reshape({outgoing.numel()}), send_ids, recv_ids, 1.0);
  Tensor pooled;
  if (owned_) {
    pooled = owned_->forward_one_hot(incoming.reshape({world * batch, mine}), out_dtype)
                 .reshape({world * batch * mine, options_.dim});
  } else {
    // Still part of the exchange both ways: its backward must run here as on every other rank.
    if (!nothing_owned_.defined() || nothing_owned_.dtype() != out_dtype || nothing_owned_.device() != ids.device())
      nothing_owned_ = Tensor::empty({0, options_.dim}, out_dtype, ids.device()).requires_grad_(true);
    pooled = nothing_owned_;
  }
  // Back to the samples' ranks, rows of D: B·(my tables) to each, B·(its tables) from each.
  return all_to_all_rows(*comm_, pooled, recv_ids, send_ids, 1.0 / static_cast<double>(world), in_flight);
}

Tensor ShardedEmbeddingBags::pooled_row_wise(const Tensor& ids, int64_t batch, DType out_dtype,
                                             std::unique_ptr<Work>* in_flight) {
  const int64_t world = plan_.world_size, count = static_cast<int64_t>(row_wise_.size());
  const Indices& idx = indices(batch, ids.device());
  const Tensor mine = gather_rows(ids.reshape({ids.numel(), 1}), idx.block_ids).reshape({batch, count});
  const Tensor every = all_gather_rows(*comm_, mine);  // [W·B, T_rw]
  if (!block_bounds_[0].defined() || block_bounds_[0].device() != ids.device()) {
    std::vector<int64_t> rows, begin, size;
    for (size_t t : row_wise_) {
      const Held h = held(t);
      rows.push_back(options_.table_rows[t]);
      begin.push_back(h.first);
      size.push_back(h.rows);
    }
    block_bounds_[0] = i64_tensor(rows, ids.device());
    block_bounds_[1] = i64_tensor(begin, ids.device());
    block_bounds_[2] = i64_tensor(size, ids.device());
  }
  const RowBlockIds local = row_block_ids(every, block_bounds_[0], block_bounds_[1], block_bounds_[2], DType::F32);
  const Tensor pooled =
      row_blocks_->forward_bags(local.ids.reshape({local.ids.numel()}), idx.bag_offsets, local.weights, out_dtype);
  return reduce_scatter_rows(*comm_, pooled, 1.0 / static_cast<double>(world), in_flight)
      .reshape({batch * count, options_.dim});
}

Tensor ShardedEmbeddingBags::forward_one_hot(const Tensor& ids, DType out_dtype) {
  return start_one_hot(ids, out_dtype)();
}

std::function<Tensor()> ShardedEmbeddingBags::start_one_hot(const Tensor& ids, DType out_dtype) {
  FT_CHECK(ids.dim() == 2 && ids.size(1) == tables(), "ShardedEmbeddingBags: ids must be [B, ", tables(), "], got ",
           shape_str(ids.shape()));
  const bool exchanges = !row_wise_.empty() || replicated_.size() < options_.table_rows.size();
  FT_CHECK(!exchanges || (comm_ && comm_->world_size() == plan_.world_size && comm_->rank() == rank_),
           "ShardedEmbeddingBags: needs the run's communicator (set_communicator) for a plan over ", plan_.world_size,
           " ranks, as rank ", rank_);
  std::optional<Communicator::TimingLabel> timed_as;
  if (comm_) timed_as.emplace(*comm_, kTablesExchange);
  const int64_t batch = ids.size(0);
  std::vector<Tensor> parts;
  // The last exchanges, left in flight until the result is asked for.
  std::unique_ptr<Work> table_wise_flight, row_wise_flight;
  if (replicated_.size() + row_wise_.size() < options_.table_rows.size())
    parts.push_back(pooled_table_wise(ids, batch, out_dtype, &table_wise_flight));
  if (!row_wise_.empty()) parts.push_back(pooled_row_wise(ids, batch, out_dtype, &row_wise_flight));
  if (replicas_) {
    const Tensor picked = gather_rows(ids.reshape({ids.numel(), 1}), indices(batch, ids.device()).replica_ids);
    const int64_t count = static_cast<int64_t>(replicated_.size());
    parts.push_back(replicas_->forward_one_hot(picked.reshape({batch, count}), out_dtype)
                        .reshape({batch * count, options_.dim}));
  }
  const RowPermutation assemble = indices(batch, ids.device()).assemble;
  auto flights = std::make_shared<std::vector<std::unique_ptr<Work>>>();
  for (auto* flight : {&table_wise_flight, &row_wise_flight})
    if (*flight) flights->push_back(std::move(*flight));
  return [this, parts = std::move(parts), assemble, flights, batch] {
    for (const auto& work : *flights) work->wait();
    flights->clear();
    const Tensor joined = parts.size() == 1 ? parts.front() : cat(parts, 0);
    return permute_rows(joined, assemble).reshape({batch, tables(), options_.dim});
  };
}

std::function<void(Tensor& ids, Tensor& offsets, Tensor& grad)> replicated_bag_exchange(Communicator& comm) {
  auto gathered_offsets = std::make_shared<Tensor>();
  return [&comm, gathered_offsets](Tensor& ids, Tensor& offsets, Tensor& grad) {
    const Communicator::TimingLabel timed_as(comm, kTablesExchange);
    const int64_t world = comm.world_size(), n = ids.numel();
    // One id per bag, checked here on each rank (no collective: this runs inside a captured step).
    // A rank with bags of several ids stops with this error; the others then fail their next
    // collective within --comm-timeout, naming it.
    FT_CHECK(offsets.defined() && offsets.numel() == n + 1, "data-parallel embedding tables need one id per bag (",
             offsets.defined() ? offsets.numel() - 1 : -1, " bags, ", n, " ids)");
    Tensor all_ids = Tensor::empty({world * n}, ids.dtype(), ids.device());
    comm.all_gather(ids.reshape({n}), all_ids)->wait();
    // Scaled before the gather: one pass over this rank's gradients, not over every rank's.
    const Tensor mine = world > 1 ? grad * (1.0 / static_cast<double>(world)) : grad;
    const Tensor flat = mine.reshape({mine.numel()});
    Tensor all_grads = Tensor::empty({world * flat.numel()}, grad.dtype(), grad.device());
    comm.all_gather(flat, all_grads)->wait();
    all_grads = all_grads.reshape({world * grad.size(0), grad.size(1)});
    // Made in the eager steps before a graph's capture, then reused: 0, 1, ..., world · n.
    Tensor& cached = *gathered_offsets;
    if (!cached.defined() || cached.numel() != world * n + 1 || cached.dtype() != offsets.dtype() ||
        cached.device() != offsets.device())
      cached = Tensor::arange(world * n + 1, offsets.dtype(), offsets.device());
    offsets = cached;
    ids = all_ids;
    grad = all_grads;
  };
}

}  // namespace ft
