// ft-mlp: trains the mlp-fmnist model (784 → 1024 → 1024 → 1024 → 10, each hidden Linear
// followed by LayerNorm, GELU and Dropout 0.1) on Fashion-MNIST with AdamW.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "examples/common/memory_check.h"
#include "examples/common/training_flags.h"
#include "lib/kernel_mode.h"
#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "models/mlp/mlp_model.h"
#include "train/data/batches.h"
#include "train/data/fashion_mnist.h"
#include "train/loop/evaluate.h"
#include "train/loop/startup.h"
#include "train/loop/trainer.h"

namespace {

void define_flags(ft::cli::Args& args) {
  ft::cli::add_training_flags(args, {});
  args.flag("epochs", "3", "passes over the 60,000 training images");
  args.flag("batch", "256", "samples per step (the benchmark uses 4096)");
  args.flag("schedule", "cosine", "constant, or cosine: linear warmup then cosine decay to 0 at the last step");
  args.flag("warmup", "10", "warmup steps of the cosine schedule");
  args.flag("hidden", "1024", "width of each hidden layer");
  args.flag("layers", "3", "number of hidden layers");
  args.flag("dropout", "0.1", "dropout probability after each hidden layer");
  args.flag("data-dir", "/usr/share/datasets/fashion-mnist", "folder with the four gzipped IDX files");
}

/// Every numeric flag is checked here, at the edge, before the data is read.
void check_flags(const ft::cli::Args& args) {
  ft::cli::check_training_flags(args, "ft-mlp");
  FT_CHECK(args.number("dropout", 0) < 1, "ft-mlp: --dropout must be below 1, got ", args.number("dropout"));
  for (const char* name : {"layers", "warmup"}) (void)args.integer(name, 0);
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

/// What the run holds: the weights with their gradients and optimizer state, certain; a batch's
/// activations (each hidden layer's linear, norm, activation and dropout outputs), estimated.
ft::cli::MemoryEstimate memory_estimate(const ft::cli::Args& args, int64_t batch, ft::DType dtype) {
  const double h = static_cast<double>(args.integer("hidden", 1)), layers = static_cast<double>(args.integer("layers", 0));
  const double params = 785 * h + std::max(0.0, layers - 1) * (h * h + h) + 2 * layers * h + 10 * h + 10;
  ft::cli::MemoryEstimate e;
  e.certain = {{"weights with gradients and optimizer state",
                params * ft::cli::training_bytes_per_parameter(dtype, args.str("optimizer"), args.number("momentum", 0))}};
  e.activations = static_cast<double>(batch) * layers * h * 8 * (dtype == ft::DType::BF16 ? 2 : 4);
  return e;
}

/// The loop's options: progress lines, the schedule, the test accuracy after each epoch.
ft::Trainer::Options trainer_options(const ft::cli::Args& args, int64_t steps, int64_t steps_per_epoch,
                                     ft::DataParallel* data_parallel) {
  ft::Trainer::Options options{.log_every = args.integer("log-every", 0),
                               .metrics_path = args.str("metrics"),
                               .graph = ft::cli::graph_flag(args),
                               .eval_every = steps_per_epoch,
                               .max_skipped_in_a_row = args.integer("max-skipped", 0),
                               .data_parallel = data_parallel};
  options.schedule.max_lr = args.number("lr", 0);
  if (args.str("schedule") == "cosine") {
    options.schedule.kind = ft::LRSchedule::Kind::WarmupCosine;
    options.schedule.warmup_steps = args.integer("warmup", 0);
    options.schedule.total_steps = steps;
  }
  return options;
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
  ft::cli::check_memory(memory_estimate(args, batch, dtype), device, "ft-mlp", "a smaller --hidden, --layers or --batch");

  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  // Each rank of a data-parallel run draws its own dropout masks (the weights come from rank 0).
  const ft::LaunchEnv launch = ft::launch_env();
  auto model = ft::cli::build_mlp(args.integer("hidden", 1), args.integer("layers", 0), args.number("dropout", 0),
                                  seed + 7919 * static_cast<uint64_t>(launch.rank));
  model->to(device, dtype);
  ft::mark_startup("model");
  // Joined before the optimizer is built: its buffers are laid out for the run's world size.
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-mlp", launch, device);
  const std::unique_ptr<ft::Optimizer> optimizer = ft::cli::make_optimizer(args, "ft-mlp", model->parameters(), dp.partition);
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
  ft::cli::check_resumed_batch(args, resumed, batch * dp.env.world_size,
                              "--batch " + std::to_string(batch) + " x " + std::to_string(dp.env.world_size) + " processes",
                              "ft-mlp");
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
  if (dp.get() && args.boolean("check-replicas")) dp.get()->check_replicas();  // the last step's update too
  ft::cli::print_communication_timing(dp, "ft-mlp");
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
