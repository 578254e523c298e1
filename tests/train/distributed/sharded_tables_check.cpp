// ft-sharded-tables-check --plan SPEC [--update sgd|adagrad|elementwise-adagrad] [--steps K] [--batch B]: run under
// scripts/launch.sh N, every rank trains the same embedding tables two ways on the same global
// batches: sharded by the plan (ShardedEmbeddingBags, its own B samples a step) and whole in
// one EmbeddingBagCollection fed all N·B samples (the one-process reference, which every rank
// can compute since the batches are drawn from the step number). Each step's pooled vectors
// must equal the reference's rows for this rank's samples exactly (every pooled row is one
// table row, and the partial sums of the row-wise tables add zeros) at the first step, and
// within --rtol later; after K steps each rank's
// rows and Adagrad accumulators must match the reference's within --rtol (the sharded update
// sums a row's gradients in another order). Prints "MATCH: worst R" or "DIFFER ...".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "layers/embedding_bag.h"
#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/runtime.h"
#include "tests/train/distributed/relative_difference.h"
#include "train/distributed/communicator.h"
#include "train/distributed/sharded_tables.h"

namespace {

using ft::Tensor;

struct Options {
  std::string plan = "auto", update = "sgd";
  int64_t steps = 5, batch = 6, dim = 8;
  double rtol = 1e-5;
  ft::Device device = ft::kCPU;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--plan") o.plan = value;
    else if (flag == "--update") o.update = value;
    else if (flag == "--steps") o.steps = std::stoll(value);
    else if (flag == "--batch") o.batch = std::stoll(value);
    else if (flag == "--rtol") o.rtol = std::stod(value);
    else if (flag == "--device") o.device = ft::Device::parse(value);
    else FT_FAIL("unknown flag ", flag);
  }
  return o;
}

// Tables of unequal sizes, one smaller than 4 ranks (placed whole by every plan but "row").
const std::vector<int64_t> kTableRows = {37, 5, 120, 64, 9, 200};

/// Step k's global ids [G, T]: half of each table's draws from its first 4 rows, so that rows
/// repeat within a batch and across ranks.
Tensor global_ids(int64_t step, int64_t samples) {
  std::vector<double> ids;
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1);
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t rows : kTableRows) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const int64_t range = (x >> 40) % 2 ? std::min<int64_t>(4, rows) : rows;
      ids.push_back(static_cast<double>((x >> 8) % static_cast<uint64_t>(range)));
    }
  return Tensor::from_vector(ids, {samples, static_cast<int64_t>(kTableRows.size())}, ft::DType::I32);
}

double worst = 0;
int failures = 0;

void compare(const std::string& what, const Tensor& got, const Tensor& want, double rtol) {
  const double rel = ft::test::relative_difference(got.to(ft::kCPU).to_vector(), want.to(ft::kCPU).to_vector());
  worst = std::max(worst, rel);
  if (rel > rtol) {
    std::printf("DIFFER %s: max|a-b| / max|b| = %.3g (tolerance %.3g)\n", what.c_str(), rel, rtol);
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const ft::LaunchEnv env = ft::launch_env();
    auto comm = ft::make_communicator(env, o.device, {});
    const int rank = comm->rank(), world = comm->world_size();
    FT_CHECK(o.update == "sgd" || o.update == "adagrad" || o.update == "elementwise-adagrad",
             "--update must be sgd, adagrad or elementwise-adagrad");
    const ft::EmbeddingBagCollection::Options tables{
        .table_rows = kTableRows,
        .dim = o.dim,
        .update = o.update == "adagrad"               ? ft::RowUpdateKind::RowWiseAdagrad
                  : o.update == "elementwise-adagrad" ? ft::RowUpdateKind::ElementwiseAdagrad
                                                      : ft::RowUpdateKind::SGD,
        .lr = 0.5};
    const ft::ShardingPlan plan = ft::plan_sharding(
        o.plan, {.table_rows = kTableRows, .bytes_per_row = 4.0 * static_cast<double>(o.dim), .world_size = world});
    if (rank == 0) std::printf("plan '%s': %s\n", o.plan.c_str(), plan.describe(kTableRows, 4.0 * o.dim).c_str());

    ft::Generator ref_gen(7), gen(7);
    ft::EmbeddingBagCollection reference(tables, ref_gen);
    ft::ShardedEmbeddingBags sharded(tables, plan, rank, gen);
    FT_CHECK(gen.offset() == ref_gen.offset(), "the sharded tables left the generator at ", gen.offset(),
             ", the whole ones at ", ref_gen.offset());
    reference.to(o.device, ft::DType::F32);
    sharded.to(o.device, ft::DType::F32);
    sharded.set_communicator(comm.get());
    sharded.set_exchange(ft::replicated_bag_exchange(*comm));

    const int64_t samples = o.batch * world, tcount = static_cast<int64_t>(kTableRows.size());
    for (int64_t step = 0; step < o.steps; ++step) {
      const Tensor ids = global_ids(step, samples).to(o.device);
      ft::Generator draw(1000 + static_cast<uint64_t>(step));
      const Tensor upstream = Tensor::randn({samples, tcount, o.dim}, draw).to(o.device);
      const Tensor want = reference.forward_one_hot(ids, ft::DType::F32);
      ft::sum_all(want * upstream * (1.0 / static_cast<double>(samples))).backward();

      const Tensor mine = ids.narrow(0, rank * o.batch, o.batch);
      const Tensor got = sharded.forward_one_hot(mine, ft::DType::F32);
      // Step 0 pools the initial rows: exactly. Later steps pool rows trained within --rtol.
      compare("step " + std::to_string(step) + " pooled", got, want.detach().narrow(0, rank * o.batch, o.batch),
              step == 0 ? 0.0 : o.rtol);
      const Tensor my_upstream = upstream.narrow(0, rank * o.batch, o.batch);
      ft::sum_all(got * my_upstream * (1.0 / static_cast<double>(o.batch))).backward();
    }
    // Each table's rows this rank holds against the reference's same rows.
    const auto ref_state = reference.state_dict();
    int64_t first_row = 0;
    for (size_t t = 0; t < kTableRows.size(); ++t) {
      const ft::ShardedEmbeddingBags::Held h = sharded.held(t);
      if (h.rows > 0) {
        compare("table " + std::to_string(t) + " rows", sharded.weight_of(t),
                reference.weight().narrow(0, first_row + h.first, h.rows), o.rtol);
        if (o.update != "sgd")
          compare("table " + std::to_string(t) + " accumulators", sharded.accumulator_of(t),
                  ref_state.at("accumulator").narrow(0, first_row + h.first, h.rows), o.rtol);
      }
      first_row += kTableRows[t];
    }
    // The tables trained: the reference moved away from its start.
    ft::Generator fresh_gen(7);
    ft::EmbeddingBagCollection fresh(tables, fresh_gen);
    const std::vector<double> start = fresh.weight().to_vector(), end = reference.weight().to(ft::kCPU).to_vector();
    double moved = 0;
    for (size_t i = 0; i < start.size(); ++i) moved = std::max(moved, std::fabs(start[i] - end[i]));
    FT_CHECK(moved > 1e-3, "the reference tables did not train (moved ", moved, ")");
    comm->barrier()->wait();
    std::printf("rank %d of %d: %s: worst %.3g, tolerance %.3g\n", rank, world, failures ? "DIFFER" : "MATCH", worst,
                o.rtol);
    return failures ? 1 : 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
