// The flags every training binary shares, declared once: the device, the seed, how long and how
// loud to run, the optimizer, checkpoints and data parallelism. Each binary gives its own
// defaults (TrainingDefaults) and adds the flags of its model and data.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "examples/common/checkpoint_flags.h"
#include "examples/common/cli.h"
#include "examples/common/data_parallel_flags.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace ft::cli {

struct TrainingDefaults {
  std::string steps = "0", steps_help = "stop after this many steps (0: --epochs decides)";
  std::string optimizer = "adamw", lr = "1e-3", weight_decay = "0.01", momentum = "0.9", log_every = "20";
  std::string optimizer_help = "adamw, or sgd (with --momentum)", lr_help = "peak learning rate";
  std::string weight_decay_help = "weight decay (AdamW's decoupled; SGD's added to the gradient)";
  std::string seed_help = "seed for initialization, shuffling and dropout";
};

/// Declares the shared flags: the device's, --seed, --steps, --log-every, --metrics, --optimizer,
/// --lr, --momentum, --weight-decay, the checkpoints' and data parallelism's.
inline void add_training_flags(Args& args, const TrainingDefaults& d) {
  add_device_flags(args);
  args.flag("seed", "0", d.seed_help);
  args.flag("steps", d.steps, d.steps_help);
  args.flag("log-every", d.log_every, "steps between progress lines (0: none; the run still prints its start and its\n"
                                      "closing RESULT line)");
  args.flag("metrics", "", "write one JSON line per logged step (and evaluation) to this file");
  args.flag("optimizer", d.optimizer, d.optimizer_help);
  args.flag("lr", d.lr, d.lr_help);
  args.flag("momentum", d.momentum, "SGD's momentum");
  args.flag("weight-decay", d.weight_decay, d.weight_decay_help);
  args.flag("max-skipped", "10", "stop with an error when this many steps in a row were skipped for a non-finite\n"
                                 "gradient norm: the run has diverged (checked at each progress line; 0: never)");
  add_checkpoint_flags(args);
  add_data_parallel_flags(args);
}

/// Checks the shared numeric flags at the edge, before any data is read (--lr and --optimizer
/// may be left empty for a preset to fill).
inline void check_training_flags(const Args& args, const std::string& program) {
  for (const char* name : {"steps", "log-every", "seed", "max-skipped"}) (void)args.integer(name, 0);
  for (const char* name : {"momentum", "weight-decay"}) (void)args.number(name, 0);
  if (!args.str("lr").empty()) (void)args.number("lr", 0);
  (void)args.boolean("resume-new-batch");
  if (args.str("ckpt-dir").empty()) args.note_ignored({"ckpt-every", "keep-last"}, "without --ckpt-dir no checkpoint is written");
  FT_CHECK(args.number("momentum") < 1, program, ": --momentum must be below 1, got ", args.number("momentum"));
}

/// What the optimizer flags leave to the binary: the name and rate when a preset chose them, the
/// step policy (clipping) and AdamW's second beta.
struct OptimizerChoice {
  std::string name, lr;  // empty: the flag's value
  StepPolicy policy{};
  double beta2 = 0.999;
};

/// The optimizer --optimizer names, over `parameters`, laid out for the run's data partition.
inline std::unique_ptr<Optimizer> make_optimizer(const Args& args, const std::string& program,
                                                 const std::vector<Tensor>& parameters, const DataPartition& partition,
                                                 const OptimizerChoice& choice = {}) {
  const std::string name = choice.name.empty() ? args.str("optimizer") : choice.name;
  const double lr = choice.lr.empty() ? args.number("lr", 0) : parse_double(choice.lr, program + ": --lr");
  FT_CHECK(lr >= 0, program, ": --lr must not be negative, got ", lr);
  const double weight_decay = args.number("weight-decay", 0);
  if (name == "adamw") args.note_ignored({"momentum"}, "AdamW has no momentum (--optimizer sgd has)");
  if (name == "adamw")
    return std::make_unique<AdamW>(parameters, AdamW::Options{.lr = lr, .beta2 = choice.beta2, .weight_decay = weight_decay,
                                                              .policy = choice.policy, .partition = partition});
  if (name == "sgd")
    return std::make_unique<SGD>(parameters, SGD::Options{.lr = lr, .momentum = args.number("momentum", 0),
                                                          .weight_decay = weight_decay, .policy = choice.policy,
                                                          .partition = partition});
  FT_FAIL(program, ": --optimizer must be adamw or sgd, got '", name, "'");
}

}  // namespace ft::cli
