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

/// The presets' sizes and optimizers; every flag left empty takes its preset's value.
struct Preset {
  int64_t dim, batch, table_rows;
  std::string bottom, top, optimizer, lr, sparse_lr;
};

Preset preset_named(const std::string& name) {
  // kaggle: dlrm's Kaggle recipe; bench: docs/workloads.md's dlrm-kaggle; mlperf: dlrm-mlperf.
  if (name == "kaggle") return {16, 128, 1000000, "512-256-64-16", "512-256-1", "sgd", "0.1", "0.1"};
  if (name == "bench") return {64, 8192, 100000, "512-256-64", "512-256-1", "adamw", "1e-3", "0.01"};
  if (name == "mlperf") return {128, 65536, 1000000, "512-256-128", "1024-1024-512-256-1", "adamw", "1e-3", "0.01"};
  FT_FAIL("ft-dlrm: --preset must be kaggle, bench or mlperf, got '", name, "'");
}

/// --preset's help: every preset's values, from the table above (so help and presets agree).
std::string preset_help() {
  std::string help = "the flags left empty take the preset's values:";
  for (const char* name : {"kaggle", "bench", "mlperf"}) {
    const Preset p = preset_named(name);
    // The tables' f32 weights alone: 26 tables of table_rows x dim.
    const double table_gb = 26.0 * static_cast<double>(p.table_rows) * static_cast<double>(p.dim) * 4 / 1e9;
    char line[320];
    std::snprintf(line, sizeof line,
                  "\n%s: --dim %lld --bottom %s --top %s --table-rows %lld (%.2f GB of tables) --batch %lld\n"
                  "  --optimizer %s --lr %s --sparse-lr %s",
                  name, static_cast<long long>(p.dim), p.bottom.c_str(), p.top.c_str(),
                  static_cast<long long>(p.table_rows), table_gb, static_cast<long long>(p.batch), p.optimizer.c_str(),
                  p.lr.c_str(), p.sparse_lr.c_str());
    help += line;
  }
  return help + "\n(kaggle: dlrm's Kaggle recipe; bench: docs/workloads.md's dlrm-kaggle; mlperf: dlrm-mlperf)";
}

/// "512-256-1" as widths; every width positive.
std::vector<int64_t> widths(const std::string& flag, const std::string& text) {
  FT_CHECK(!text.empty() && text.front() != '-' && text.back() != '-', "ft-dlrm: --", flag,
           " must be widths joined by '-', like 512-256-1, got '", text, "'");
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, '-')) {
    char* end = nullptr;
    const long long w = std::strtoll(part.c_str(), &end, 10);
    FT_CHECK(!part.empty() && *end == '\0' && w > 0, "ft-dlrm: --", flag, " must be widths joined by '-', like 512-256-1, got '",
             text, "'");
    out.push_back(w);
  }
  FT_CHECK(!out.empty(), "ft-dlrm: --", flag, " is empty");
  return out;
}

std::string or_preset(const ft::cli::Args& args, const std::string& flag, const std::string& preset_value) {
  const std::string v = args.str(flag);
  return v.empty() ? preset_value : v;
}

int make_synthetic(const ft::cli::Args& args, int64_t table_rows) {
  const std::string path = args.str("make-synthetic");
  FT_CHECK(!std::filesystem::exists(path), "ft-dlrm: --make-synthetic: '", path,
           "' exists; it is not overwritten (remove it, or name another file)");
  const int64_t rows = args.integer("rows", 1);
  FT_CHECK(rows >= 2, "ft-dlrm: --rows must be at least 2, got ", rows);
  const ft::SyntheticCriteoInfo info = ft::write_synthetic_criteo(
      path, {.rows = rows, .seed = static_cast<uint64_t>(args.integer("seed", 0)), .table_rows = {table_rows}});
  std::printf("ft-dlrm: wrote %lld rows to %s (click rate %.4f; the true model's AUC: %.4f on all rows, %.4f on the "
              "test split) and %s.json\n",
              static_cast<long long>(info.rows), path.c_str(), info.positive_rate, info.best_auc, info.best_test_auc,
              path.c_str());
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
  args.flag("data", "", "the Criteo TSV (label, I1..I13, C1..C26); its parsed columns are cached beside it\n"
                        "(<file>.ftcache, or in --cache-dir) and memory-mapped by later runs");
  args.flag("cache-dir", "", "folder for the parse cache");
  args.flag("skip-bad-lines", "0", "1: skip and count malformed lines instead of stopping at the first");
  args.flag("make-synthetic", "", "write a synthetic Criteo TSV with --rows lines (labels from a hidden logistic model\n"
                                  "over the hashed features, its AUC written to FILE.json) and exit");
  args.flag("rows", "1000000", "lines for --make-synthetic");
  args.flag("preset", "kaggle", "kaggle, bench or mlperf; " + preset_help());
  args.flag("dim", "", "D, the embedding width (the bottom MLP's last width; empty: the preset's)");
  args.flag("bottom", "", "bottom MLP widths after the 13 dense inputs, e.g. 512-256-64-16 (empty: the preset's)");
  args.flag("top", "", "top MLP widths after the interaction, ending at 1, e.g. 512-256-1 (empty: the preset's)");
  args.flag("table-rows", "", "rows of each of the 26 tables; categorical values are hashed modulo it\n(empty: the preset's)");
  args.flag("pooling", "sum", "sum or mean (one id per bag in Criteo, so both give the same model)");
  args.flag("batch", "", "samples per step (empty: the preset's)");
  args.flag("sparse-optimizer", "sgd",
            "the tables' update inside backward: sgd; adagrad (exact row-wise Adagrad: one f32\n"
            "accumulator a row); or elementwise-adagrad (exact Adagrad: one a value, the tables' size again)");
  args.flag("sparse-lr", "", "the tables' learning rate (empty: the preset's)");
  args.flag("sharding", "replicated",
            "where the tables live when several processes train (scripts/launch.sh N, torchrun):\n"
            "replicated: every process holds every table and applies every process's updates;\n"
            "auto: tables larger than 1/N of all are split row-wise over the processes, the rest\n"
            "placed whole, each on the process holding the fewest bytes; table: every table whole;\n"
            "row: every table split row-wise; or 26 comma-separated entries, one a table: a process\n"
            "number (the table whole there), r (row-wise) or d (replicated). The plan is printed\n"
            "at start-up. Sharded tables exchange ids and pooled vectors by all-to-all each step");
  args.flag("epochs", "1", "passes over the training rows");
  args.flag("eval-every", "0", "steps between validation passes (0: only at the end)");
  args.flag("eval-batches", "0", "batches per validation pass (0: the whole validation split)");
}

/// The model's and the run's sizes: the preset's, or the flags' where given.
struct Settings {
  int64_t dim, batch, table_rows;
  double sparse_lr;
  std::vector<int64_t> bottom, top;
  std::string optimizer, lr;  // the preset's when the flags are empty
  ft::BagMode pooling;
  ft::RowUpdateKind sparse_update;
  std::string sharding;
};

int64_t preset_integer(const ft::cli::Args& args, const std::string& flag, int64_t preset_value) {
  const int64_t x = ft::parse_int64(or_preset(args, flag, std::to_string(preset_value)), "ft-dlrm: --" + flag);
  FT_CHECK(x > 0, "ft-dlrm: --", flag, " must be positive, got ", x);
  return x;
}

/// Every flag is checked here, before any data is read.
Settings check_flags(const ft::cli::Args& args, const Preset& preset) {
  ft::cli::check_training_flags(args, "ft-dlrm");
  for (const char* name : {"epochs", "eval-every", "eval-batches"}) (void)args.integer(name, 0);
  (void)args.boolean("skip-bad-lines");
  Settings s{.dim = preset_integer(args, "dim", preset.dim), .batch = preset_integer(args, "batch", preset.batch),
             .table_rows = preset_integer(args, "table-rows", preset.table_rows)};
  s.sparse_lr = ft::parse_double(or_preset(args, "sparse-lr", preset.sparse_lr), "ft-dlrm: --sparse-lr");
  FT_CHECK(s.sparse_lr >= 0, "ft-dlrm: --sparse-lr must not be negative, got ", s.sparse_lr);
  s.optimizer = or_preset(args, "optimizer", preset.optimizer);
  s.lr = or_preset(args, "lr", preset.lr);
  const std::string pooling = args.str("pooling"), sparse_optimizer = args.str("sparse-optimizer");
  FT_CHECK(pooling == "sum" || pooling == "mean", "ft-dlrm: --pooling must be sum or mean, got '", pooling, "'");
  FT_CHECK(sparse_optimizer == "sgd" || sparse_optimizer == "adagrad" || sparse_optimizer == "elementwise-adagrad",
           "ft-dlrm: --sparse-optimizer must be sgd, adagrad or elementwise-adagrad, got '", sparse_optimizer, "'");
  s.pooling = pooling == "mean" ? ft::BagMode::Mean : ft::BagMode::Sum;
  s.sparse_update = sparse_optimizer == "adagrad"               ? ft::RowUpdateKind::RowWiseAdagrad
                    : sparse_optimizer == "elementwise-adagrad" ? ft::RowUpdateKind::ElementwiseAdagrad
                                                                : ft::RowUpdateKind::SGD;
  s.sharding = args.str("sharding");
  s.bottom = widths("bottom", or_preset(args, "bottom", preset.bottom));
  s.top = widths("top", or_preset(args, "top", preset.top));
  FT_CHECK(s.bottom.back() == s.dim, "ft-dlrm: --bottom must end at --dim ", s.dim,
           " (the dense features join the tables' vectors in the interaction), it ends at ", s.bottom.back());
  FT_CHECK(s.top.back() == 1, "ft-dlrm: --top must end at 1 (the click logit), it ends at ", s.top.back());
  return s;
}

/// Bytes of one table row: its f32 values and its f32 Adagrad accumulators (one, or one a value).
double table_row_bytes(const Settings& s) {
  const double values = static_cast<double>(s.dim) * 4;
  if (s.sparse_update == ft::RowUpdateKind::RowWiseAdagrad) return values + 4;
  return s.sparse_update == ft::RowUpdateKind::ElementwiseAdagrad ? 2 * values : values;
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
  add_mlp(ft::DLRM::interaction_width(ft::kCriteoSparse, s.dim), s.top);
  const double per_param = ft::cli::training_bytes_per_parameter(dtype, s.optimizer, args.number("momentum", 0));
  ft::cli::MemoryEstimate e;
  e.certain = {tables,
               {"the MLPs with gradients and optimizer state", mlp_params * per_param}};
  // A batch's rows of every width, forward and backward, and the interaction's vectors.
  e.activations = static_cast<double>(s.batch) * (widths + (ft::kCriteoSparse + 1) * static_cast<double>(s.dim)) * 4 * 3;
  return e;
}

/// The file, parsed or from its cache, and dlrm's split of it.
struct Data {
  std::string path;
  ft::CriteoDataset dataset;
  ft::CriteoSplit split;
};
Data open_data(const ft::cli::Args& args, int64_t batch) {
  const std::string path = args.str("data");
  FT_CHECK(!path.empty(), "ft-dlrm: give the training data with --data FILE (a Criteo TSV), or write one with "
                          "--make-synthetic FILE --rows N");
  ft::CriteoDataset dataset = ft::CriteoDataset::open(
      path, {.skip_bad_lines = args.boolean("skip-bad-lines"), .cache_dir = args.str("cache-dir")});
  const ft::CriteoSplit split = ft::criteo_kaggle_split(dataset.rows());
  if (ft::launch_env().rank == 0)
    std::printf("ft-dlrm: %s: %lld rows (%s), train %lld, test %lld, val %lld%s\n", path.c_str(),
                static_cast<long long>(dataset.rows()), dataset.cache_reused() ? "from its cache" : "parsed",
                static_cast<long long>(split.train.size()), static_cast<long long>(split.test.size()),
                static_cast<long long>(split.val.size()),
                dataset.bad_lines() ? (", " + std::to_string(dataset.bad_lines()) + " bad lines skipped").c_str() : "");
  // Refused before training, not found empty when the run is over.
  FT_CHECK(split.train.size() > 0 && split.val.size() > 0 && split.test.size() > 0, "ft-dlrm: ", path, " has ",
           dataset.rows(), " rows, too few for dlrm's split (6/7 train, the last 1/7 halved into test and ",
           "validation: ", split.train.size(), ", ", split.test.size(), " and ", split.val.size(),
           " rows); it needs at least 14");
  FT_CHECK(batch <= split.train.size(), "ft-dlrm: --batch must be in [1, ", split.train.size(), "] (the training rows)");
  return {path, std::move(dataset), split};
}

/// --sharding's plan for this run, or nullopt when every process holds every table (one process,
/// or --sharding replicated). A plan whose tables do not fit a process's free memory, less the
/// rest of the run, is an ft::Error.
std::optional<ft::ShardingPlan> sharding_plan(const Settings& s, const ft::cli::Args& args, const ft::LaunchEnv& env,
                                              ft::Device device, ft::DType dtype) {
  if (s.sharding == "replicated") return std::nullopt;  // the memory check sizes the whole tables
  const std::vector<int64_t> rows(ft::kCriteoSparse, s.table_rows);
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
  const std::vector<int64_t> rows(ft::kCriteoSparse, s.table_rows);
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
  const std::vector<int64_t> rows(ft::kCriteoSparse, s.table_rows);
  if (!plan) return {"26 tables", static_cast<double>(ft::kCriteoSparse * s.table_rows) * table_row_bytes(s)};
  return {"this process's share of the tables", plan->bytes_per_rank(rows, table_row_bytes(s))[static_cast<size_t>(rank)]};
}

std::shared_ptr<ft::DLRM> build_model(const Settings& s, uint64_t seed, const std::optional<ft::ShardingPlan>& plan,
                                      int rank) {
  ft::Generator gen(seed);
  return std::make_shared<ft::DLRM>(
      ft::DLRM::Options{.dense_features = ft::kCriteoDense,
                        .bottom = s.bottom,
                        .top = s.top,
                        .tables = {.table_rows = std::vector<int64_t>(ft::kCriteoSparse, s.table_rows),
                                   .dim = s.dim,
                                   .mode = s.pooling,
                                   .update = s.sparse_update,
                                   .lr = s.sparse_lr},
                        .sharding = plan,
                        .rank = rank},
      gen);
}

void print_banner(ft::DLRM& model, const Settings& s, const ft::cli::Args& args, ft::Device device,
                  ft::DType dtype) {
  // Counted from the sizes: with sharded tables this process holds only its share.
  const int64_t table_parameters = ft::kCriteoSparse * s.table_rows * s.dim;
  int64_t mlp_parameters = 0;
  for (const ft::Tensor& p : model.dense_parameters()) mlp_parameters += p.numel();
  std::printf("ft-dlrm: %lld parameters (%lld in 26 tables of %lld x %lld, f32) on %s (MLPs %s), kernels %s%s, "
              "batch %lld, %s lr %g, sparse %s lr %g\n",
              static_cast<long long>(mlp_parameters + table_parameters), static_cast<long long>(table_parameters),
              static_cast<long long>(s.table_rows), static_cast<long long>(s.dim), device.str().c_str(),
              ft::dtype_name(dtype), ft::kernel_mode_name(ft::kernel_mode()),
              device.is_cuda() && ft::cli::graph_flag(args) ? ", CUDA graph" : "", static_cast<long long>(s.batch),
              s.optimizer.c_str(), ft::parse_double(s.lr, "ft-dlrm: --lr"), args.str("sparse-optimizer").c_str(), model.tables().options().lr);
}

/// The model's log loss, accuracy and exact AUC over a range of rows, in batches of at least 4096.
ft::BinaryMetrics evaluate(ft::DLRM& model, const Data& data, const ft::RowRange& range, int64_t batch,
                           int64_t max_batches, ft::Device device) {
  ft::CriteoBatchSource source(data.dataset, range, model.tables().options().table_rows,
                               ft::BatchSampler(range.size(), std::max<int64_t>(batch, 4096), 0, false, false));
  const int64_t batches = max_batches > 0 ? std::min(max_batches, source.batches_per_epoch()) : source.batches_per_epoch();
  return ft::evaluate_binary(model, source, batches, device,
                             [&](const ft::Batch& b) { return model.logits(b.at("dense"), b.at("sparse")); });
}

/// The loop's options: the constant rate, the model's FLOPs per sample, validation on the val split.
ft::Trainer::Options trainer_options(const ft::cli::Args& args, ft::DLRM& model, const Data& data, const Settings& s,
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

void report(const ft::FitSummary& summary, const ft::BinaryMetrics& test, const Data& data, int64_t batch,
            int64_t steps, ft::Device device) {
  std::printf("ft-dlrm: test: %s\n", metrics_line(test).c_str());
  if (std::filesystem::exists(data.path + ".json")) {
    const ft::SyntheticCriteoInfo info = ft::read_synthetic_criteo_info(data.path);
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
                     "feature updated by a sparse optimizer inside backward, dot interaction, top MLP, BCE) on a Criteo\n"
                     "Kaggle TSV file split as dlrm splits it (6/7 train; the last 1/7: test, then validation), and reports\n"
                     "the validation and test log loss, accuracy and exact AUC. --make-synthetic writes a file to try it on.");
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
  const Data data = open_data(args, s.batch);
  ft::mark_startup("data");
  const ft::LaunchEnv env = ft::launch_env();
  const std::optional<ft::ShardingPlan> plan = sharding_plan(s, args, env, device, dtype);
  ft::cli::check_memory(memory_estimate(s, args, dtype, tables_held(s, plan, env.rank)), device, "ft-dlrm",
                        "make the tables smaller (--table-rows, --dim) or the batch (--batch)" +
                            std::string(env.world_size > 1 ? ", or shard them (--sharding auto)" : ""));

  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  const std::shared_ptr<ft::DLRM> model = build_model(s, seed, plan, env.rank);
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

  ft::CriteoBatchSource source(data.dataset, data.split.train, model->tables().options().table_rows,
                               ft::BatchSampler(data.split.train.size(), s.batch, seed, true, true, dp.shard()));
  const int64_t steps = args.integer("steps", 0) > 0 ? args.integer("steps", 0)
                                                     : args.integer("epochs", 0) * source.batches_per_epoch();
  FT_CHECK(steps > 0, "ft-dlrm: --epochs and --steps must not both be 0");
  ft::Trainer::Options options = trainer_options(args, *model, data, s, device, dp.get());
  ft::cli::wire_checkpoints(
      args, options, *model, *optimizer,
      [&](ft::DataPosition& run_state) {
        run_state["data"] = data.path;
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
  ft::cli::print_reduction_timing(dp, "ft-dlrm");
  if (dp.primary()) report(summary, test, data, s.batch, steps, device);  // every rank evaluated the same weights
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
