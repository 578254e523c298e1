// --ckpt-dir, --ckpt-every and --resume, the same in every binary: checkpoints go through
// train/io/checkpoint.h (atomic folders, `latest`), and a resumed run continues exactly (model,
// optimizer state, step count, data position).
#pragma once
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "examples/common/cli.h"
#include "lib/launch_env.h"
#include "lib/parse.h"
#include "train/distributed/communicator.h"
#include "train/io/checkpoint.h"
#include "train/loop/trainer.h"

namespace ft::cli {

inline void add_checkpoint_flags(Args& args) {
  args.flag("ckpt-dir", "", "folder for checkpoints (empty: none)");
  args.flag("ckpt-every", "0", "steps between checkpoints (0: only at the end, when --ckpt-dir is set)");
  args.flag("keep-last", "0", "keep only this many newest checkpoints in --ckpt-dir (0: all)");
  args.flag("resume", "", "checkpoint folder, or a --ckpt-dir holding 'latest', to continue from (the run's\n"
                          "other flags must match the checkpointed run's)");
  args.flag("resume-new-batch", "0", "1: let --resume continue with a global batch (--batch x processes, x\n"
                                     "--grad-accum) other than the checkpoint's; the data position is kept as it is");
}

/// State each rank holds its own part of (sharded embedding tables), kept out of
/// model.safetensors: every rank writes its own file into a checkpoint, and --resume reads what
/// this rank holds from the files of a run of any world size.
struct RankState {
  /// The model's parameters this state covers (their names start with it).
  std::string prefix;
  /// The run's ranks, to order their writes around rank 0's save; null for one process.
  Communicator* comm = nullptr;
  /// Writes this rank's file into the folder; unset: the parameters go in model.safetensors as
  /// usual (the run holds the whole state in one process) and only loading is special.
  std::function<void(const std::string& folder)> write = {};
  /// The file names every rank writes, for the manifest.
  std::vector<std::string> files = {};
  /// Loads this rank's part from a complete checkpoint folder.
  std::function<void(const std::string& folder)> load = {};
};

/// Where --resume left the run: the checkpoint's step and the data source's position.
struct Resumed {
  int64_t step = 0;
  DataPosition position;
  std::map<std::string, std::string> run_state;  ///< everything the checkpoint's metadata holds
};

/// Loads --resume, when given, into model and optimizer; `position_keys` are the data source's
/// position fields (each must be in the checkpoint).
inline Resumed resume_from_flag(const Args& args, Module& model, Optimizer& optimizer,
                                const std::vector<std::string>& position_keys, const RankState* rank_state = nullptr) {
  Resumed out;
  if (args.str("resume").empty()) return out;
  try {
    out.run_state = load_checkpoint(args.str("resume"), model, optimizer, rank_state ? rank_state->prefix : "");
    if (rank_state) rank_state->load(resolve_checkpoint_folder(args.str("resume")));
  } catch (const Error& e) {
    FT_FAIL("--resume '", args.str("resume"), "': ", e.what());
  }
  out.step = parse_int64(out.run_state.at("step"), "--resume: the checkpoint's step");
  for (const std::string& key : position_keys) {
    auto it = out.run_state.find(key);
    FT_CHECK(it != out.run_state.end(), "--resume: the checkpoint '", args.str("resume"), "' has no data position '",
             key, "' (was it written by another binary?)");
    out.position[key] = it->second;
  }
  if (launch_env().rank == 0) std::printf("resumed from step %lld\n", static_cast<long long>(out.step));
  return out;
}

/// A resumed run must have steps left: --steps at or below the checkpoint's step is an error
/// naming both (it would train nothing and report no loss).
inline void check_steps_left(const Resumed& resumed, int64_t steps, const std::string& program) {
  FT_CHECK(steps > resumed.step, program, ": --steps ", steps, " is not beyond the checkpoint's step ", resumed.step,
           ": nothing is left to train (--steps counts from the start of the run)");
}

/// The global batch a checkpoint was written with (run state "batch size": --batch times the
/// processes, times --grad-accum where there is one): a resume with another is an error naming
/// both, unless --resume-new-batch 1 says it is meant.
inline void check_resumed_batch(const Args& args, const Resumed& resumed, int64_t global_batch,
                                const std::string& how, const std::string& program) {
  const bool allowed = args.boolean("resume-new-batch");
  auto saved = resumed.run_state.find("batch size");
  if (saved == resumed.run_state.end() || saved->second == std::to_string(global_batch)) return;
  FT_CHECK(allowed, program, ": --resume: the checkpoint was written with a global batch of ", saved->second,
           ", this run has ", global_batch, " (", how, "); give --resume-new-batch 1 if the change is meant");
  if (launch_env().rank == 0)
    std::printf("%s: --resume with a global batch of %lld, the checkpoint's was %s (--resume-new-batch 1)\n",
                program.c_str(), static_cast<long long>(global_batch), saved->second.c_str());
}

/// With --ckpt-dir set, has the trainer write checkpoints there (every --ckpt-every steps and at
/// the end). `describe` adds run state of the binary's own; `after_save` gets each folder. In a
/// data-parallel run (options.data_parallel set first) every rank takes part in gathering the
/// optimizer state (ZeRO-1 shards it) and rank 0 writes. With `rank_state` writing, every rank
/// first writes its own file into the checkpoint's staging folder.
inline void wire_checkpoints(const Args& args, Trainer::Options& options, const Module& model,
                             Optimizer& optimizer,
                             std::function<void(DataPosition&)> describe = {},
                             std::function<void(const std::string&)> after_save = {},
                             std::optional<RankState> rank_state = std::nullopt) {
  const int64_t keep_last = args.integer("keep-last", 0);
  if (args.str("ckpt-dir").empty()) return;
  options.checkpoint_every = args.integer("ckpt-every", 0);
  const bool primary = !options.data_parallel || options.data_parallel->rank() == 0;
  // A fresh run into a folder of an earlier run's checkpoints moves `latest` to its own: say so.
  if (primary && args.str("resume").empty() && std::filesystem::exists(args.str("ckpt-dir") + "/latest"))
    std::fprintf(stderr, "note: --ckpt-dir '%s' holds an earlier run's checkpoints; this run's replace its `latest` "
                         "(--resume continues that run instead)\n", args.str("ckpt-dir").c_str());
  const bool every_rank = (options.data_parallel && options.data_parallel->sharded()) || (rank_state && rank_state->write);
  options.checkpoint = [&args, &model, &optimizer, describe, after_save, primary, keep_last, every_rank, rank_state](
                           int64_t step, const DataPosition& position) {
    if (!primary && !every_rank) return;
    const WholeParameters whole(optimizer.store());  // ZeRO-3: the layers gathered (every rank: sharded)
    const std::map<std::string, Tensor> optimizer_state = optimizer.state();
    CheckpointShards shards;
    if (rank_state && rank_state->write) {
      // Rank 0 makes the staging folder, every rank writes its file there, then rank 0 completes it.
      const std::string root = args.str("ckpt-dir");
      if (primary) checkpoint_staging_folder(root, step, /*create=*/true);
      if (rank_state->comm) rank_state->comm->barrier()->wait();
      rank_state->write(checkpoint_staging_folder(root, step, /*create=*/false));
      if (rank_state->comm) rank_state->comm->barrier()->wait();
      shards = {.rank_files = rank_state->files, .prefix = rank_state->prefix};
    }
    if (!primary) return;
    DataPosition run_state = position;
    if (describe) describe(run_state);
    const std::string folder =
        shards.rank_files.empty()
            ? save_checkpoint(args.str("ckpt-dir"), step, model, optimizer_state, run_state)
            : save_checkpoint(args.str("ckpt-dir"), step, model, optimizer_state, run_state, shards);
    if (after_save) after_save(folder);
    if (keep_last > 0) prune_checkpoints(args.str("ckpt-dir"), keep_last);
    std::printf("checkpoint: %s\n", folder.c_str());
  };
}

}  // namespace ft::cli
