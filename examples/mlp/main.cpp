// ft-mlp: trains the mlp-fmnist model (784 → 1024 → 1024 → 1024 → 10, each hidden Linear
// followed by LayerNorm, GELU and Dropout 0.1) on Fashion-MNIST with AdamW.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "examples/common/checkpoint_flags.h"
#include "examples/common/cli.h"
#include "examples/common/data_parallel_flags.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "models/mlp/mlp_model.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "train/data/batches.h"
#include "train/data/fashion_mnist.h"
#include "train/loop/evaluate.h"
#include "train/loop/startup.h"
#include "train/loop/trainer.h"

namespace {

void define_flags(ft::cli::Args& args) {
  ft::cli::add_device_flags(args);
  args.flag("epochs", "3", "passes over the 60,000 training images");
  args.flag("batch", "256", "samples per step (the benchmark uses 4096)");
  args.flag("optimizer", "adamw", "adamw, or sgd (with --momentum)");
  args.flag("lr", "1e-3", "peak learning rate");
  args.flag("momentum", "0.9", "SGD's momentum");
  args.flag("schedule", "cosine", "constant, or cosine: linear warmup then cosine decay to 0 at the last step");
  args.flag("warmup", "10", "warmup steps of the cosine schedule");
  args.flag("weight-decay", "0.01", "weight decay (AdamW's decoupled; SGD's added to the gradient)");
  args.flag("hidden", "1024", "width of each hidden layer");
  args.flag("layers", "3", "number of hidden layers");
  args.flag("dropout", "0.1", "dropout probability after each hidden layer");
  args.flag("seed", "0", "seed for initialization, shuffling and dropout");
  args.flag("data-dir", "/usr/share/datasets/fashion-mnist", "folder with the four gzipped IDX files");
  args.flag("metrics", "", "write one JSON line per logged step to this file");
  args.flag("log-every", "20", "steps between progress lines");
  args.flag("steps", "0", "stop after this many steps (0: --epochs decides)");
  ft::cli::add_checkpoint_flags(args);
  ft::cli::add_data_parallel_flags(args);
}

/// Every numeric flag is checked here, at the edge, before the data is read.
void check_flags(const ft::cli::Args& args) {
  for (const char* name : {"lr", "weight-decay", "momentum", "dropout"}) (void)args.number(name, 0);
  FT_CHECK(args.number("momentum") < 1, "ft-mlp: --momentum must be below 1, got ", args.number("momentum"));
  FT_CHECK(args.number("dropout") < 1, "ft-mlp: --dropout must be below 1, got ", args.number("dropout"));
  for (const char* name : {"layers", "steps", "warmup", "log-every", "seed"}) (void)args.integer(name, 0);
  (void)args.integer("hidden", 1);
  FT_CHECK(args.integer("epochs", 0) > 0 && args.integer("batch", 1) > 0,
           "ft-mlp: --epochs and --batch must be positive");
  const std::string schedule = args.str("schedule");
  FT_CHECK(schedule == "constant" || schedule == "cosine", "ft-mlp: --schedule must be constant or cosine, got '",
           schedule, "'");
}

/// The images live on the training device in the compute dtype (rounded to nearest, as the
/// device's cast does), and a batch is its row ids and labels: the step gathers its rows in one
/// kernel instead of the host gathering and uploading them, the way a GPU dataloader serves a
/// dataset that fits in device memory.
struct Data {
  ft::ImageDataset train, test;
  ft::Tensor train_images, test_images;
};
Data load_data(const std::string& dir, ft::Device device, ft::DType dtype) {
  Data d{ft::load_fashion_mnist(dir, "train"), ft::load_fashion_mnist(dir, "t10k"), {}, {}};
  d.train_images = ft::cast(d.train.images, dtype).to(device);
  d.test_images = ft::cast(d.test.images, dtype);
  return d;
}

std::unique_ptr<ft::Optimizer> make_optimizer(const ft::cli::Args& args, ft::Module& model,
                                              const ft::DataPartition& partition) {
  const std::string name = args.str("optimizer");
  const double lr = args.number("lr", 0), weight_decay = args.number("weight-decay", 0);
  if (name == "adamw")
    return std::make_unique<ft::AdamW>(
        model.parameters(), ft::AdamW::Options{.lr = lr, .weight_decay = weight_decay, .partition = partition});
  if (name == "sgd")
    return std::make_unique<ft::SGD>(model.parameters(),
                                     ft::SGD::Options{.lr = lr, .momentum = args.number("momentum", 0),
                                                      .weight_decay = weight_decay, .partition = partition});
  FT_FAIL("ft-mlp: --optimizer must be adamw or sgd, got '", name, "'");
}

/// The loop's options: progress lines, the schedule, the test accuracy after each epoch.
ft::Trainer::Options trainer_options(const ft::cli::Args& args, int64_t steps, int64_t steps_per_epoch,
                                     ft::DataParallel* data_parallel) {
  ft::Trainer::Options options{.log_every = args.integer("log-every", 0),
                               .metrics_path = args.str("metrics"),
                               .graph = ft::cli::graph_flag(args),
                               // The step's loss is read at logged steps only: no extra kernel a step.
                               .window_loss = false,
                               .eval_every = steps_per_epoch,
                               .data_parallel = data_parallel};
  options.schedule.max_lr = args.number("lr", 0);
  if (args.str("schedule") == "cosine") {
    options.schedule.kind = ft::LRSchedule::Kind::WarmupCosine;
    options.schedule.warmup_steps = args.integer("warmup", 0);
    options.schedule.total_steps = steps;
  }
  return options;
}

/// The data position counts global batches (--batch times the processes): a resume must keep it.
void check_resumed_batch(const ft::cli::Resumed& resumed, int64_t batch, int world_size) {
  const int64_t global_batch = batch * world_size;
  if (auto saved = resumed.run_state.find("batch size"); saved != resumed.run_state.end())
    FT_CHECK(saved->second == std::to_string(global_batch), "ft-mlp: --resume: the checkpoint was written with a ",
             "global batch of ", saved->second, " samples, this run has ", global_batch, " (--batch ", batch, " x ",
             world_size, " processes; its data position counts batches of that size)");
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-mlp",
                     "Trains an MLP classifier on Fashion-MNIST (the mlp-fmnist workload of docs/workloads.md) and\n"
                     "prints a progress line every few steps and the test accuracy after each epoch.");
  define_flags(args);
  if (!args.parse(argc, argv)) return 0;
  check_flags(args);
  const ft::Device device = ft::cli::apply_device_flags(args, "ft-mlp");
  const ft::KernelMode mode = ft::kernel_mode();
  // Parameters and activations are bf16 on CUDA (fp32 master weights in AdamW), f32 on the CPU.
  const ft::DType dtype = device.is_cuda() ? ft::DType::BF16 : ft::DType::F32;
  const int64_t epochs = args.integer("epochs", 0), batch = args.integer("batch", 1);
  const Data data = load_data(args.str("data-dir"), device, dtype);
  ft::mark_startup("data");

  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  // Each rank of a data-parallel run draws its own dropout masks (the weights come from rank 0).
  const ft::LaunchEnv launch = ft::launch_env();
  auto model = ft::cli::build_mlp(args.integer("hidden", 1), args.integer("layers", 0), args.number("dropout", 0),
                                  seed + 7919 * static_cast<uint64_t>(launch.rank));
  model->to(device, dtype);
  ft::mark_startup("model");
  // Joined before the optimizer is built: its buffers are laid out for the run's world size.
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-mlp", launch, device);
  const std::unique_ptr<ft::Optimizer> optimizer = make_optimizer(args, *model, dp.partition);
  const ft::cli::Resumed resumed = ft::cli::resume_from_flag(args, *model, *optimizer, {"epoch", "batch"});
  // After the resume: rank 0's weights (resumed or fresh) are every rank's.
  ft::cli::start_data_parallel(dp, args, "ft-mlp", *model, *optimizer);
  ft::mark_startup("optimizer");
  if (dp.primary())
    std::printf("ft-mlp: %lld parameters on %s (%s), kernels %s%s, batch %lld per process, %lld epochs\n",
                static_cast<long long>(model->parameter_count()), device.str().c_str(), ft::dtype_name(dtype),
                ft::kernel_mode_name(mode), device.is_cuda() && ft::cli::graph_flag(args) ? ", CUDA graph" : "",
                static_cast<long long>(batch), static_cast<long long>(epochs));

  ft::RowBatchSource source({{"ids", ft::Tensor::arange(data.train.size())}, {"labels", data.train.labels}},
                            ft::BatchSampler(data.train.size(), batch, seed, true, true, dp.shard()));
  const int64_t steps_per_epoch = source.batches_per_epoch();
  const int64_t steps = args.integer("steps", 0) > 0 ? args.integer("steps", 0) : epochs * steps_per_epoch;
  ft::Trainer::Options options = trainer_options(args, steps, steps_per_epoch, dp.get());
  options.eval = [&](ft::Module& m) {
    return std::map<std::string, double>{
        {"test accuracy", ft::evaluate_accuracy(m, data.test_images, data.test.labels, 1024, device, dtype)}};
  };
  check_resumed_batch(resumed, batch, dp.env.world_size);
  ft::cli::wire_checkpoints(args, options, *model, *optimizer, [&](ft::DataPosition& run_state) {
    run_state["batch size"] = std::to_string(batch * dp.env.world_size);
  });
  ft::Trainer trainer(*model, *optimizer, source,
                      [&](ft::Module& m, const ft::Batch& b) {
                        const ft::Tensor images = ft::gather_rows(data.train_images, b.at("ids"));
                        return ft::cross_entropy(m.forward(images), b.at("labels"));
                      },
                      options);
  if (!args.str("resume").empty()) {
    ft::cli::check_steps_left(resumed, steps, "ft-mlp");
    trainer.resume(resumed.step, resumed.position);
  }
  const ft::FitSummary summary = trainer.fit(steps);
  if (dp.get() && args.integer("check-replicas", 0)) dp.get()->check_replicas();  // the last step's update too
  ft::cli::print_reduction_timing(dp, "ft-mlp");
  if (!dp.primary()) return 0;
  // One machine-readable summary line for scripts: median_ms is the step alone (GPU events on
  // CUDA), wall_ms the wall clock per step with the data pipeline.
  std::printf("RESULT device=%s kernels=%s batch=%lld median_ms=%.4f wall_ms=%.4f test_accuracy=%.4f\n",
              device.str().c_str(), ft::kernel_mode_name(mode), static_cast<long long>(batch), summary.step_ms,
              summary.wall_ms, summary.eval.at("test accuracy"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
