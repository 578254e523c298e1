// ft-dlrm: trains facebookresearch/dlrm's model (dot interaction) on Criteo Kaggle TSV files,
// or writes a synthetic file in that format whose best possible AUC is known.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "examples/common/checkpoint_flags.h"
#include "examples/common/cli.h"
#include "examples/common/data_parallel_flags.h"
#include "lib/kernel_mode.h"
#include "lib/ops/bce/bce.h"
#include "lib/parse.h"
#include "models/dlrm/dlrm.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
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

/// "512-256-1" as widths; every width positive.
std::vector<int64_t> widths(const std::string& flag, const std::string& text) {
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
  char line[160];
  std::snprintf(line, sizeof line, "logloss %.5f, accuracy %.4f, AUC %.5f over %lld samples", m.logloss, m.accuracy,
                m.auc, static_cast<long long>(m.count));
  return line;
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-dlrm",
                     "Trains a DLRM (facebookresearch/dlrm's model: bottom MLP, one embedding-bag table per categorical\n"
                     "feature updated by a sparse optimizer inside backward, dot interaction, top MLP, BCE) on a Criteo\n"
                     "Kaggle TSV file split as dlrm splits it (6/7 train; the last 1/7: test, then validation), and reports\n"
                     "the validation and test log loss, accuracy and exact AUC. --make-synthetic writes a file to try it on.");
  ft::cli::add_device_flags(args);
  args.flag("data", "", "the Criteo TSV (label, I1..I13, C1..C26); its parsed columns are cached beside it\n"
                        "(<file>.ftcache, or in --cache-dir) and memory-mapped by later runs");
  args.flag("cache-dir", "", "folder for the parse cache");
  args.flag("skip-bad-lines", "0", "1: skip and count malformed lines instead of stopping at the first");
  args.flag("make-synthetic", "", "write a synthetic Criteo TSV with --rows lines (labels from a hidden logistic model\n"
                                  "over the hashed features, its AUC written to FILE.json) and exit");
  args.flag("rows", "1000000", "lines for --make-synthetic");
  args.flag("preset", "kaggle", "kaggle (dlrm's Kaggle recipe: D 16, SGD lr 0.1, batch 128), bench (docs/workloads.md's\n"
                                "dlrm-kaggle: D 64, AdamW + sparse SGD, batch 8192) or mlperf (D 128, batch 65536)");
  args.flag("dim", "", "D, the embedding width (the bottom MLP's last width)");
  args.flag("bottom", "", "bottom MLP widths after the 13 dense inputs, e.g. 512-256-64-16");
  args.flag("top", "", "top MLP widths after the interaction, ending at 1, e.g. 512-256-1");
  args.flag("table-rows", "", "rows of each of the 26 tables; categorical values are hashed modulo it");
  args.flag("pooling", "sum", "sum or mean (one id per bag in Criteo, so both give the same model)");
  args.flag("batch", "", "samples per step");
  args.flag("optimizer", "", "the MLPs' optimizer: sgd or adamw");
  args.flag("lr", "", "the MLPs' learning rate");
  args.flag("weight-decay", "0", "AdamW's decoupled weight decay");
  args.flag("sparse-optimizer", "sgd", "the tables' update inside backward: sgd or adagrad (exact row-wise Adagrad)");
  args.flag("sparse-lr", "", "the tables' learning rate");
  args.flag("epochs", "1", "passes over the training rows");
  args.flag("steps", "0", "stop after this many steps (0: --epochs decides)");
  args.flag("eval-every", "0", "steps between validation passes (0: only at the end)");
  args.flag("eval-batches", "0", "batches per validation pass (0: the whole validation split)");
  args.flag("seed", "0", "seed for initialization, shuffling and --make-synthetic");
  args.flag("metrics", "", "write one JSON line per logged step and evaluation to this file");
  ft::cli::add_checkpoint_flags(args);
  ft::cli::add_data_parallel_flags(args);
  args.flag("log-every", "100", "steps between progress lines");
  if (!args.parse(argc, argv)) return 0;

  const Preset preset = preset_named(args.str("preset"));
  const int64_t table_rows = ft::parse_int64(or_preset(args, "table-rows", std::to_string(preset.table_rows)), "ft-dlrm: --table-rows");
  FT_CHECK(table_rows > 0, "ft-dlrm: --table-rows must be positive");
  if (!args.str("make-synthetic").empty()) return make_synthetic(args, table_rows);

  // The preset's values or the flags', checked before any data is read.
  const int64_t dim = ft::parse_int64(or_preset(args, "dim", std::to_string(preset.dim)), "ft-dlrm: --dim");
  FT_CHECK(dim > 0, "ft-dlrm: --dim must be positive, got ", dim);
  const double sparse_lr = ft::parse_double(or_preset(args, "sparse-lr", preset.sparse_lr), "ft-dlrm: --sparse-lr");
  FT_CHECK(sparse_lr >= 0, "ft-dlrm: --sparse-lr must not be negative, got ", sparse_lr);
  const double lr = ft::parse_double(or_preset(args, "lr", preset.lr), "ft-dlrm: --lr");
  FT_CHECK(lr >= 0, "ft-dlrm: --lr must not be negative, got ", lr);
  const int64_t batch = ft::parse_int64(or_preset(args, "batch", std::to_string(preset.batch)), "ft-dlrm: --batch");
  FT_CHECK(batch > 0, "ft-dlrm: --batch must be positive, got ", batch);
  (void)args.number("weight-decay", 0);
  for (const char* name : {"steps", "epochs", "eval-every", "eval-batches", "log-every"}) (void)args.integer(name, 0);

  const ft::Device device = ft::cli::apply_device_flags(args, "ft-dlrm");
  const ft::KernelMode mode = ft::kernel_mode();
  const ft::DType dtype = device.is_cuda() ? ft::DType::BF16 : ft::DType::F32;
  const std::string pooling = args.str("pooling"), sparse_optimizer = args.str("sparse-optimizer");
  FT_CHECK(pooling == "sum" || pooling == "mean", "ft-dlrm: --pooling must be sum or mean, got '", pooling, "'");
  FT_CHECK(sparse_optimizer == "sgd" || sparse_optimizer == "adagrad",
           "ft-dlrm: --sparse-optimizer must be sgd or adagrad, got '", sparse_optimizer, "'");
  const std::vector<int64_t> bottom = widths("bottom", or_preset(args, "bottom", preset.bottom));
  const std::vector<int64_t> top = widths("top", or_preset(args, "top", preset.top));
  FT_CHECK(bottom.back() == dim, "ft-dlrm: --bottom must end at --dim ", dim,
           " (the dense features join the tables' vectors in the interaction), it ends at ", bottom.back());
  FT_CHECK(top.back() == 1, "ft-dlrm: --top must end at 1 (the click logit), it ends at ", top.back());

  const std::string data_path = args.str("data");
  FT_CHECK(!data_path.empty(), "ft-dlrm: give the training data with --data FILE (a Criteo TSV), or write one with "
                               "--make-synthetic FILE --rows N");
  const ft::CriteoDataset data = ft::CriteoDataset::open(
      data_path, {.skip_bad_lines = args.integer("skip-bad-lines", 0) != 0, .cache_dir = args.str("cache-dir")});
  const ft::CriteoSplit split = ft::criteo_kaggle_split(data.rows());
  if (ft::launch_env().rank == 0)
    std::printf("ft-dlrm: %s: %lld rows (%s), train %lld, test %lld, val %lld%s\n", data_path.c_str(),
              static_cast<long long>(data.rows()), data.cache_reused() ? "from its cache" : "parsed",
              static_cast<long long>(split.train.size()), static_cast<long long>(split.test.size()),
              static_cast<long long>(split.val.size()),
              data.bad_lines() ? (", " + std::to_string(data.bad_lines()) + " bad lines skipped").c_str() : "");
  ft::mark_startup("data");

  FT_CHECK(batch <= split.train.size(), "ft-dlrm: --batch must be in [1, ", split.train.size(),
           "] (the training rows)");
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  ft::Generator gen(seed);
  const std::vector<int64_t> rows_per_table(ft::kCriteoSparse, table_rows);
  auto model = std::make_shared<ft::DLRM>(
      ft::DLRM::Options{.dense_features = ft::kCriteoDense,
                        .bottom = bottom,
                        .top = top,
                        .tables = {.table_rows = rows_per_table,
                                   .dim = dim,
                                   .mode = pooling == "mean" ? ft::BagMode::Mean : ft::BagMode::Sum,
                                   .update = sparse_optimizer == "adagrad" ? ft::RowUpdateKind::RowWiseAdagrad
                                                                           : ft::RowUpdateKind::SGD,
                                   .lr = sparse_lr}},
      gen);
  model->to(device, dtype);
  ft::mark_startup("model");
  // Joined before the optimizer (its buffers are laid out for the run's world size). Every rank
  // holds every table; the tables' update applies every rank's bags (DataParallel::bag_exchange).
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-dlrm", ft::launch_env(), device);
  const std::string optimizer_name = or_preset(args, "optimizer", preset.optimizer);
  std::unique_ptr<ft::Optimizer> optimizer;
  if (optimizer_name == "adamw")
    optimizer = std::make_unique<ft::AdamW>(
        model->dense_parameters(),
        ft::AdamW::Options{.lr = lr, .weight_decay = args.number("weight-decay", 0), .partition = dp.partition});
  else if (optimizer_name == "sgd")
    optimizer = std::make_unique<ft::SGD>(model->dense_parameters(),
                                          ft::SGD::Options{.lr = lr, .partition = dp.partition});
  else
    FT_FAIL("ft-dlrm: --optimizer must be sgd or adamw, got '", optimizer_name, "'");
  // The tables and their Adagrad accumulators are model state (state_dict); the optimizer's holds
  // the MLPs' moments or momentum.
  const ft::cli::Resumed resumed = ft::cli::resume_from_flag(args, *model, *optimizer, {"epoch", "batch"});
  // The data position counts global batches: --batch times the processes.
  const int64_t global_batch = batch * dp.env.world_size;
  if (auto saved = resumed.run_state.find("batch size"); saved != resumed.run_state.end())
    FT_CHECK(saved->second == std::to_string(global_batch), "ft-dlrm: --resume: the checkpoint was written with a ",
             "global batch of ", saved->second, " samples, this run has ", global_batch, " (--batch ", batch, " x ",
             dp.env.world_size, " processes; its data position counts batches of that size)");
  ft::cli::start_data_parallel(dp, args, "ft-dlrm", *model, *optimizer);
  if (dp.get()) model->tables().set_exchange(dp.get()->bag_exchange());
  if (dp.primary())
    std::printf("ft-dlrm: %lld parameters (%lld in 26 tables of %lld x %lld, f32) on %s (MLPs %s), kernels %s%s, "
              "batch %lld, %s lr %g, sparse %s lr %g\n",
              static_cast<long long>(model->parameter_count()), static_cast<long long>(model->tables().weight().numel()),
              static_cast<long long>(table_rows), static_cast<long long>(dim), device.str().c_str(),
              ft::dtype_name(dtype), ft::kernel_mode_name(mode),
              device.is_cuda() && ft::cli::graph_flag(args) ? ", CUDA graph" : "", static_cast<long long>(batch),
              optimizer_name.c_str(), lr, sparse_optimizer.c_str(), model->tables().options().lr);

  ft::CriteoBatchSource source(data, split.train, rows_per_table,
                               ft::BatchSampler(split.train.size(), batch, seed, true, true, dp.shard()));
  auto eval_on = [&](const ft::RowRange& range, int64_t max_batches) {
    const int64_t eval_batch = std::max<int64_t>(batch, 4096);
    ft::CriteoBatchSource eval_source(data, range, rows_per_table,
                                      ft::BatchSampler(range.size(), eval_batch, 0, false, false));
    const int64_t batches = max_batches > 0 ? std::min(max_batches, eval_source.batches_per_epoch())
                                            : eval_source.batches_per_epoch();
    return ft::evaluate_binary(*model, eval_source, batches, device, [&](const ft::Batch& b) {
      return model->logits(b.at("dense"), b.at("sparse"));
    });
  };
  const int64_t steps_per_epoch = source.batches_per_epoch();
  const int64_t steps = args.integer("steps", 0) > 0 ? args.integer("steps", 0) : args.integer("epochs", 0) * steps_per_epoch;
  FT_CHECK(steps > 0, "ft-dlrm: --epochs and --steps must not both be 0");
  ft::Trainer::Options options{.log_every = args.integer("log-every", 0),
                               .metrics_path = args.str("metrics"),
                               .flops_per_item = model->flops_per_sample(),
                               .graph = ft::cli::graph_flag(args),
                               .window_loss = false,
                               .eval_every = args.integer("eval-every", 0),
                               .data_parallel = dp.get()};
  options.schedule.max_lr = lr;
  options.eval = [&](ft::Module&) {
    const ft::BinaryMetrics m = eval_on(split.val, args.integer("eval-batches", 0));
    return std::map<std::string, double>{{"val auc", m.auc}, {"val logloss", m.logloss}, {"val accuracy", m.accuracy}};
  };
  ft::cli::wire_checkpoints(args, options, *model, *optimizer, [&](ft::DataPosition& run_state) {
    run_state["data"] = data_path;
    run_state["batch size"] = std::to_string(global_batch);
  });
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
  const ft::BinaryMetrics test = eval_on(split.test, 0);
  ft::cli::print_reduction_timing(dp, "ft-dlrm");
  if (!dp.primary()) return 0;  // every rank evaluated the same weights; rank 0 reports
  std::printf("ft-dlrm: test: %s\n", metrics_line(test).c_str());
  if (std::filesystem::exists(data_path + ".json")) {
    const ft::SyntheticCriteoInfo info = ft::read_synthetic_criteo_info(data_path);
    std::printf("ft-dlrm: the synthetic file's true model reaches AUC %.5f on the test split\n", info.best_test_auc);
  }
  std::printf("RESULT device=%s kernels=%s batch=%lld steps=%lld median_ms=%.4f wall_ms=%.4f samples_per_s=%.0f "
              "val_auc=%.5f test_auc=%.5f test_logloss=%.5f test_accuracy=%.5f\n",
              device.str().c_str(), ft::kernel_mode_name(mode), static_cast<long long>(batch),
              static_cast<long long>(steps), summary.step_ms, summary.wall_ms, summary.items_per_s,
              summary.eval.count("val auc") ? summary.eval.at("val auc") : 0.0, test.auc, test.logloss, test.accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
