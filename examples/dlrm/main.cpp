// ft-dlrm: trains facebookresearch/dlrm's model (dot interaction) on Criteo Kaggle TSV files,
// or writes a synthetic file in that format whose best possible AUC is known.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/memory_check.h"
#include "examples/common/training_flags.h"
#include "examples/dlrm/criteo_files.h"
#include "examples/dlrm/settings.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bce/bce.h"
#include "lib/parse.h"
#include "models/dlrm/dlrm.h"
#include "train/data/criteo.h"
#include "train/data/criteo_synthetic.h"
#include "train/loop/evaluate.h"
#include "train/loop/startup.h"
#include "train/loop/trainer.h"

namespace {

using namespace ft::dlrm;

/// --make-synthetic: one file, or with --days K a folder of day files day_0 ... day_{K-1} of one
/// hidden model, their ids across the tables' whole ranges (Criteo 1TB's shape).
int make_synthetic(const ft::cli::Args& args, const std::vector<int64_t>& table_rows) {
  const std::string path = args.str("make-synthetic");
  FT_CHECK(!std::filesystem::exists(path), "ft-dlrm: --make-synthetic: '", path,
           "' exists; it is not overwritten (remove it, or name another file)");
  const int64_t rows = args.integer("rows", 1), days = args.integer("days", 0);
  FT_CHECK(rows >= 2, "ft-dlrm: --rows must be at least 2, got ", rows);
  FT_CHECK(days >= 0, "ft-dlrm: --days must not be negative, got ", days);
  const auto seed = static_cast<uint64_t>(args.integer("seed", 0));
  if (days == 0) {
    const ft::SyntheticCriteoInfo info =
        ft::write_synthetic_criteo(path, {.rows = rows, .seed = seed, .table_rows = table_rows});
    std::printf("ft-dlrm: wrote %lld rows to %s (click rate %.4f; the true model's AUC: %.4f on all rows, %.4f on the "
                "test split) and %s.json\n",
                static_cast<long long>(info.rows), path.c_str(), info.positive_rate, info.best_auc, info.best_test_auc,
                path.c_str());
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  FT_CHECK(!ec, "ft-dlrm: --make-synthetic: cannot create the folder '", path, "': ", ec.message());
  for (int64_t day = 0; day < days; ++day) {
    const std::string file = path + "/day_" + std::to_string(day);
    const ft::SyntheticCriteoInfo info = ft::write_synthetic_criteo(
        file, {.rows = rows, .seed = seed, .table_rows = table_rows, .full_range_ids = true,
               .day = static_cast<uint64_t>(day), .test_first_half = true});
    std::printf("ft-dlrm: wrote %lld rows to %s (click rate %.4f; the true model's AUC %.4f, %.4f on its first half)\n",
                static_cast<long long>(info.rows), file.c_str(), info.positive_rate, info.best_auc, info.best_test_auc);
  }
  return 0;
}

std::string metrics_line(const ft::BinaryMetrics& m) {
  char line[200];
  const std::string auc = m.auc_missing.empty() ? std::to_string(m.auc) : "not measurable (" + m.auc_missing + ")";
  std::snprintf(line, sizeof line, "logloss %.5f, accuracy %.4f, AUC %s over %lld samples", m.logloss, m.accuracy,
                auc.c_str(), static_cast<long long>(m.count));
  return line;
}

void define_flags(ft::cli::Args& args) {
  ft::cli::add_training_flags(args, {.optimizer = "", .lr = "", .weight_decay = "0", .momentum = "0", .log_every = "100",
                                     .optimizer_help = "the MLPs' optimizer: sgd or adamw (empty: the preset's)",
                                     .lr_help = "the MLPs' learning rate (empty: the preset's)",
                                     .weight_decay_help = "AdamW's decoupled weight decay",
                                     .seed_help = "seed for initialization, shuffling and --make-synthetic"});
  args.flag("data", "", "the Criteo TSV files (label, I1..I13, C1..C26), comma-separated paths or glob patterns\n"
                        "(their matches in natural order: day_2 before day_10). One file is split as dlrm splits\n"
                        "Kaggle's (6/7 train; the last 1/7 halved into test, then validation); of several (Criteo\n"
                        "1TB's day_0..day_23) the last is held out and halved, test then validation, as MLPerf\n"
                        "splits day_23. Each file's parsed columns are cached beside it (<file>.ftcache, or in\n"
                        "--cache-dir), written piece by piece, and memory-mapped by later runs");
  args.flag("test", "", "held-out files to test on (as --data names files); then every --data file trains");
  args.flag("val", "", "held-out files to validate on; one of --test and --val stands for both when alone");
  args.flag("eval-only", "0", "1: evaluate --resume's checkpoint on the validation and test rows and exit");
  args.flag("cache-dir", "", "folder for the parse cache");
  args.flag("skip-bad-lines", "0", "1: skip and count malformed lines instead of stopping at the first");
  args.flag("make-synthetic", "", "write a synthetic Criteo TSV with --rows lines (labels from a hidden logistic model\n"
                                  "over the hashed features, its AUC written to FILE.json) and exit; with --days K,\n"
                                  "a folder of K day files of one hidden model, ids across the tables' whole ranges");
  args.flag("rows", "1000000", "lines for --make-synthetic (each day's, with --days)");
  args.flag("days", "0", "day files for --make-synthetic (0: one file)");
  args.flag("preset", "kaggle", "kaggle, bench, mlperf or criteo1tb; " + preset_help());
  args.flag("dim", "", "D, the embedding width (the bottom MLP's last width; empty: the preset's)");
  args.flag("bottom", "", "bottom MLP widths after the 13 dense inputs, e.g. 512-256-64-16 (empty: the preset's)");
  args.flag("top", "", "top MLP widths after the interaction, ending at 1, e.g. 512-256-1 (empty: the preset's)");
  args.flag("table-rows", "", "rows of the 26 tables: one count for all, or 26 comma-separated; categorical values\n"
                              "are hashed modulo their table's rows (empty: the preset's)");
  args.flag("max-ind-range", "0", "cap every table at this many rows, its values hashed modulo it, as\n"
                                  "facebookresearch/dlrm's --max-ind-range (0: no cap)");
  args.flag("pooling", "sum", "sum or mean (one id per bag in Criteo, so both give the same model)");
  args.flag("batch", "", "samples per step (empty: the preset's)");
  args.flag("sparse-optimizer", "",
            "the tables' update inside backward: sgd; adagrad (exact row-wise Adagrad: one f32\n"
            "accumulator a row); or elementwise-adagrad (exact Adagrad: one a value, the tables' size again)\n"
            "(empty: the preset's)");
  args.flag("sparse-lr", "", "the tables' learning rate (empty: the preset's)");
  args.flag("sharding", "replicated",
            "where the tables live when several processes train (scripts/launch.sh N, torchrun):\n"
            "replicated: every process holds every table and applies every process's updates;\n"
            "auto: tables larger than 1/N of all are split row-wise over the processes, the rest\n"
            "placed whole, each on the process holding the fewest bytes; table: every table whole;\n"
            "row: every table split row-wise; or 26 comma-separated entries, one a table: a process\n"
            "number (the table whole there), r (row-wise) or d (replicated). The plan is printed\n"
            "at start-up. Sharded tables exchange ids and pooled vectors by all-to-all each step");
  args.flag("interaction", "dot", "dot (dlrm's pairwise dot products) or dcn (MLPerf DLRMv2's DCNv2 cross network\n"
                                  "over the bottom output and the 26 pooled vectors joined: --dcn-layers low-rank\n"
                                  "cross layers of rank --dcn-rank)");
  args.flag("dcn-rank", "512", "the cross layers' rank (--interaction dcn)");
  args.flag("dcn-layers", "3", "cross layers (--interaction dcn)");
  args.flag("epochs", "1", "passes over the training rows");
  args.flag("eval-every", "0", "steps between validation passes (0: only at the end)");
  args.flag("eval-batches", "0", "batches per validation pass (0: the whole validation split)");
}

/// What the run holds: this process's tables (`tables`: what, and the bytes of their f32 rows
/// with optimizer state) and the MLPs with their training state, certain; the activations of a
/// batch, estimated.
ft::cli::MemoryEstimate memory_estimate(const Settings& s, const ft::cli::Args& args, ft::DType dtype,
                                        const std::pair<std::string, double>& tables) {
  double mlp_params = 0, widths = 0;
  auto add_mlp = [&](int64_t in, const std::vector<int64_t>& layers) {
    for (int64_t w : layers) {
      mlp_params += static_cast<double>(in * w + w);
      widths += static_cast<double>(w);
      in = w;
    }
  };
  add_mlp(ft::kCriteoDense, s.bottom);
  const int64_t interaction_width = ft::DLRM::interaction_width(ft::kCriteoSparse, s.dim, interaction(s));
  add_mlp(interaction_width, s.top);
  if (s.cross) mlp_params += static_cast<double>(s.cross_layers * (2 * interaction_width * s.cross_rank + interaction_width));
  const double per_param = ft::cli::training_bytes_per_parameter(dtype, s.optimizer, args.number("momentum", 0));
  ft::cli::MemoryEstimate e;
  e.certain = {tables,
               {"the MLPs with gradients and optimizer state", mlp_params * per_param}};
  // A batch's rows of every width, forward and backward, and the interaction's vectors.
  e.activations = static_cast<double>(s.batch) * (widths + (ft::kCriteoSparse + 1) * static_cast<double>(s.dim)) * 4 * 3;
  return e;
}

/// --sharding's plan for this run, or nullopt when every process holds every table (one process,
/// or --sharding replicated). A plan whose tables do not fit a process's free memory, less the
/// rest of the run, is an ft::Error.
std::optional<ft::ShardingPlan> sharding_plan(const Settings& s, const ft::cli::Args& args, const ft::LaunchEnv& env,
                                              ft::Device device, ft::DType dtype) {
  if (s.sharding == "replicated") return std::nullopt;  // the memory check sizes the whole tables
  const std::vector<int64_t>& rows = s.table_rows;
  // One process shards only under --data-parallel on (its exchanges then go to itself: a test of
  // the sharded path on one GPU).
  const bool shards = env.world_size > 1 || args.str("data-parallel") == "on";
  const ft::cli::MemoryEstimate rest = memory_estimate(s, args, dtype, {"", 0});
  // The processes of a CPU run share the host's memory; a GPU's is its own.
  const double free_bytes = device.is_cuda() ? static_cast<double>(ft::device_memory_free())
                                             : static_cast<double>(ft::host_memory_available()) / env.world_size;
  const double budget = free_bytes > 0 ? std::max(1.0, free_bytes - rest.certain_bytes() - rest.activations) : 0;
  const ft::ShardingPlan plan = ft::plan_sharding(
      s.sharding, {.table_rows = rows, .bytes_per_row = table_row_bytes(s), .world_size = env.world_size,
                   .budget_per_rank = shards ? budget : 0});
  if (plan.replicated()) return std::nullopt;
  if (!shards) {
    std::printf("ft-dlrm: note: --sharding %s: one process holds every table\n", s.sharding.c_str());
    return std::nullopt;
  }
  if (env.rank == 0)
    std::printf("ft-dlrm: tables sharded over %d processes (--sharding %s): %s\n", env.world_size, s.sharding.c_str(),
                plan.describe(rows, table_row_bytes(s)).c_str());
  return plan;
}

/// The tables in checkpoints: a sharded run's ranks each write their rows
/// (tables-<rank>.safetensors); one process holding them all writes them in model.safetensors.
/// --resume reads this process's rows from either, whatever the writing run's placement.
ft::cli::RankState table_checkpoints(ft::DLRM& model, const Settings& s, const ft::cli::DataParallelRun& dp) {
  const std::vector<int64_t>& rows = s.table_rows;
  const int64_t dim = s.dim;
  ft::cli::RankState state{.prefix = "tables."};
  state.load = [&model, rows, dim](const std::string& folder) {
    ft::load_stored_tables(model.tables(), ft::StoredTables(folder, "tables.", rows, dim));
  };
  if (ft::ShardedEmbeddingBags* sharded = model.sharded_tables()) {
    const int rank = dp.env.rank, world = dp.env.world_size;
    state.comm = dp.comm.get();
    state.write = [sharded, rows, dim, rank, world](const std::string& folder) {
      ft::write_table_shard(folder + "/" + ft::table_shard_file(rank), sharded->rows_to_save(), rows, dim, rank, world);
    };
    for (int r = 0; r < world; ++r) state.files.push_back(ft::table_shard_file(r));
  }
  return state;
}

/// This process's tables for the memory check: (what, bytes).
std::pair<std::string, double> tables_held(const Settings& s, const std::optional<ft::ShardingPlan>& plan, int rank) {
  const std::vector<int64_t>& rows = s.table_rows;
  if (!plan) return {"26 tables", static_cast<double>(total_rows(s)) * table_row_bytes(s)};
  return {"this process's share of the tables", plan->bytes_per_rank(rows, table_row_bytes(s))[static_cast<size_t>(rank)]};
}

std::shared_ptr<ft::DLRM> build_model(const Settings& s, uint64_t seed, const std::optional<ft::ShardingPlan>& plan,
                                      int rank, ft::Device device) {
  ft::Generator gen(seed);
  return std::make_shared<ft::DLRM>(
      ft::DLRM::Options{.dense_features = ft::kCriteoDense,
                        .bottom = s.bottom,
                        .top = s.top,
                        .tables = {.table_rows = s.table_rows,
                                   .dim = s.dim,
                                   .mode = s.pooling,
                                   .update = s.sparse_update,
                                   .lr = s.sparse_lr,
                                   .device = device},
                        .sharding = plan,
                        .rank = rank,
                        .interaction = interaction(s),
                        .cross_rank = s.cross_rank,
                        .cross_layers = s.cross_layers},
      gen);
}

void print_banner(ft::DLRM& model, const Settings& s, const ft::cli::Args& args, ft::Device device,
                  ft::DType dtype) {
  // Counted from the sizes: with sharded tables this process holds only its share.
  const int64_t table_parameters = total_rows(s) * s.dim;
  int64_t mlp_parameters = 0;
  for (const ft::Tensor& p : model.dense_parameters()) mlp_parameters += p.numel();
  const char* sparse = s.sparse_update == ft::RowUpdateKind::SGD              ? "sgd"
                       : s.sparse_update == ft::RowUpdateKind::RowWiseAdagrad ? "adagrad"
                                                                              : "elementwise-adagrad";
  std::printf("ft-dlrm: %lld parameters (%lld in %s x %lld, f32) on %s (MLPs %s), kernels %s%s, "
              "batch %lld, %s lr %g, sparse %s lr %g\n",
              static_cast<long long>(mlp_parameters + table_parameters), static_cast<long long>(table_parameters),
              describe_tables(s.table_rows).c_str(), static_cast<long long>(s.dim), device.str().c_str(),
              ft::dtype_name(dtype), ft::kernel_mode_name(ft::kernel_mode()),
              device.is_cuda() && ft::cli::graph_flag(args) ? ", CUDA graph" : "", static_cast<long long>(s.batch),
              s.optimizer.c_str(), ft::parse_double(s.lr, "ft-dlrm: --lr"), sparse, model.tables().options().lr);
}

/// The model's log loss, accuracy and exact AUC over a range of rows, in batches of at least 4096.
ft::BinaryMetrics evaluate(ft::DLRM& model, const CriteoFiles& data, const ft::RowRange& range, int64_t batch,
                           int64_t max_batches, ft::Device device) {
  ft::CriteoBatchSource source(data.rows, range, model.tables().options().table_rows,
                               ft::BatchSampler(range.size(), std::max<int64_t>(batch, 4096), 0, false, false));
  const int64_t batches = max_batches > 0 ? std::min(max_batches, source.batches_per_epoch()) : source.batches_per_epoch();
  return ft::evaluate_binary(model, source, batches, device,
                             [&](const ft::Batch& b) { return model.logits(b.at("dense"), b.at("sparse")); });
}

/// The loop's options: the constant rate, the model's FLOPs per sample, validation on the val split.
ft::Trainer::Options trainer_options(const ft::cli::Args& args, ft::DLRM& model, const CriteoFiles& data, const Settings& s,
                                     ft::Device device, ft::DataParallel* data_parallel) {
  ft::Trainer::Options options{.log_every = args.integer("log-every", 0),
                               .metrics_path = args.str("metrics"),
                               .flops_per_item = model.flops_per_sample(),
                               .graph = ft::cli::graph_flag(args),
                               .eval_every = args.integer("eval-every", 0),
                               .max_skipped_in_a_row = args.integer("max-skipped", 0),
                               .data_parallel = data_parallel};
  options.schedule.max_lr = ft::parse_double(s.lr, "ft-dlrm: --lr");
  options.eval = [&args, &model, &data, batch = s.batch, device](ft::Module&) {
    const ft::BinaryMetrics m = evaluate(model, data, data.split.val, batch, args.integer("eval-batches", 0), device);
    return std::map<std::string, double>{{"val auc", m.auc}, {"val logloss", m.logloss}, {"val accuracy", m.accuracy}};
  };
  return options;
}

/// --eval-only: --resume's weights on the validation and test rows (every rank evaluates them).
int evaluate_only(const ft::cli::Args& args, ft::DLRM& model, const CriteoFiles& data, const Settings& s,
                  ft::Device device, bool primary) {
  const ft::BinaryMetrics val = evaluate(model, data, data.split.val, s.batch, 0, device);
  const ft::BinaryMetrics test = evaluate(model, data, data.split.test, s.batch, 0, device);
  if (!primary) return 0;
  std::printf("ft-dlrm: val: %s\nft-dlrm: test: %s\n", metrics_line(val).c_str(), metrics_line(test).c_str());
  std::printf("RESULT eval_only=1 val_auc=%.5f val_logloss=%.5f val_accuracy=%.5f test_auc=%.5f test_logloss=%.5f "
              "test_accuracy=%.5f\n",
              val.auc, val.logloss, val.accuracy, test.auc, test.logloss, test.accuracy);
  return 0;
}

void report(const ft::FitSummary& summary, const ft::BinaryMetrics& test, const CriteoFiles& data, int64_t batch,
            int64_t steps, ft::Device device) {
  std::printf("ft-dlrm: test: %s\n", metrics_line(test).c_str());
  if (std::filesystem::exists(data.held_out + ".json")) {
    const ft::SyntheticCriteoInfo info = ft::read_synthetic_criteo_info(data.held_out);
    std::printf("ft-dlrm: the synthetic file's true model reaches AUC %.5f on the test split\n", info.best_test_auc);
  }
  std::printf("RESULT device=%s kernels=%s batch=%lld steps=%lld median_ms=%.4f wall_ms=%.4f samples_per_s=%.0f "
              "val_auc=%.5f test_auc=%.5f test_logloss=%.5f test_accuracy=%.5f\n",
              device.str().c_str(), ft::kernel_mode_name(ft::kernel_mode()), static_cast<long long>(batch),
              static_cast<long long>(steps), summary.step_ms, summary.wall_ms, summary.items_per_s,
              summary.eval.count("val auc") ? summary.eval.at("val auc") : 0.0, test.auc, test.logloss, test.accuracy);
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-dlrm",
                     "Trains a DLRM (facebookresearch/dlrm's model: bottom MLP, one embedding-bag table per categorical\n"
                     "feature updated by a sparse optimizer inside backward, dot interaction, top MLP, BCE) on Criteo\n"
                     "TSV files: Kaggle's one file split as dlrm splits it, or Criteo 1TB's day files with day_23 held\n"
                     "out, and reports the validation and test log loss, accuracy and exact AUC. Several processes\n"
                     "(scripts/launch.sh N, torchrun) train data-parallel, their tables sharded by --sharding.\n"
                     "--make-synthetic writes files to try it on.");
  define_flags(args);
  if (!args.parse(argc, argv)) return 0;
  const Preset preset = preset_named(args.str("preset"));
  const Settings s = check_flags(args, preset);
  if (!args.str("make-synthetic").empty()) {
    args.note_ignored({"data", "steps", "epochs", "batch", "lr", "optimizer", "ckpt-dir", "resume", "metrics"},
                      "--make-synthetic writes a file and exits");
    return make_synthetic(args, s.table_rows);
  }
  const ft::Device device = ft::cli::apply_device_flags(args, "ft-dlrm");
  const ft::DType dtype = device.is_cuda() ? ft::DType::BF16 : ft::DType::F32;
  const CriteoFiles data = open_criteo_files(args, s.batch);
  ft::mark_startup("data");
  const ft::LaunchEnv env = ft::launch_env();
  const std::optional<ft::ShardingPlan> plan = sharding_plan(s, args, env, device, dtype);
  ft::cli::check_memory(memory_estimate(s, args, dtype, tables_held(s, plan, env.rank)), device, "ft-dlrm",
                        "make the tables smaller (--table-rows, --dim) or the batch (--batch)" +
                            std::string(env.world_size > 1 ? ", or shard them (--sharding auto)" : ""));

  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  const std::shared_ptr<ft::DLRM> model = build_model(s, seed, plan, env.rank, device);
  model->to(device, dtype);
  ft::mark_startup("model");
  // Joined before the optimizer (its buffers are laid out for the run's world size). The MLPs
  // are data-parallel. Sharded tables exchange ids and pooled vectors over the communicator;
  // replicated ones apply every rank's bags (DataParallel::bag_exchange).
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-dlrm", env, device);
  if (ft::ShardedEmbeddingBags* sharded = model->sharded_tables()) sharded->set_communicator(dp.comm.get());
  // The tables and their Adagrad accumulators are model state (state_dict); the optimizer's holds
  // the MLPs' moments or momentum.
  const std::unique_ptr<ft::Optimizer> optimizer = ft::cli::make_optimizer(
      args, "ft-dlrm", model->dense_parameters(), dp.partition, {.name = s.optimizer, .lr = s.lr});
  const ft::cli::RankState tables_state = table_checkpoints(*model, s, dp);
  const ft::cli::Resumed resumed =
      ft::cli::resume_from_flag(args, *model, *optimizer, {"epoch", "batch"}, &tables_state);
  ft::cli::check_resumed_batch(args, resumed, s.batch * dp.env.world_size,
                              "--batch " + std::to_string(s.batch) + " x " + std::to_string(dp.env.world_size) +
                                  " processes",
                              "ft-dlrm");
  ft::cli::start_data_parallel(dp, args, "ft-dlrm", *model, *optimizer);
  if (dp.get()) model->tables().set_exchange(dp.get()->bag_exchange());
  if (dp.primary()) print_banner(*model, s, args, device, dtype);

  if (args.boolean("eval-only")) return evaluate_only(args, *model, data, s, device, dp.primary());
  ft::CriteoBatchSource source(data.rows, data.split.train, model->tables().options().table_rows,
                               ft::BatchSampler(data.split.train.size(), s.batch, seed, true, true, dp.shard()));
  const int64_t steps = args.integer("steps", 0) > 0 ? args.integer("steps", 0)
                                                     : args.integer("epochs", 0) * source.batches_per_epoch();
  FT_CHECK(steps > 0, "ft-dlrm: --epochs and --steps must not both be 0");
  ft::Trainer::Options options = trainer_options(args, *model, data, s, device, dp.get());
  ft::cli::wire_checkpoints(
      args, options, *model, *optimizer,
      [&](ft::DataPosition& run_state) {
        run_state["data"] = data.description;
        run_state["batch size"] = std::to_string(s.batch * dp.env.world_size);
      },
      {}, tables_state);
  ft::Trainer trainer(*model, *optimizer, source,
                      [&](ft::Module&, const ft::Batch& b) {
                        return ft::binary_cross_entropy_with_logits(model->logits(b.at("dense"), b.at("sparse")),
                                                                    b.at("labels"));
                      },
                      options);
  if (!args.str("resume").empty()) {
    ft::cli::check_steps_left(resumed, steps, "ft-dlrm");
    trainer.resume(resumed.step, resumed.position);
  }
  const ft::FitSummary summary = trainer.fit(steps);
  const ft::BinaryMetrics test = evaluate(*model, data, data.split.test, s.batch, 0, device);
  ft::cli::print_communication_timing(dp, "ft-dlrm");
  if (dp.primary()) report(summary, test, data, s.batch, steps, device);  // every rank evaluated the same weights
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
