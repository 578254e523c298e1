// Training checkpoints: the model's parameters (safetensors, by parameter name, loadable by
// PyTorch's `safetensors`), the optimizer state beside them, and run state (step, data position,
// anything the caller adds) as metadata.
//
// Each checkpoint is a folder <root>/step_<N>/ written under a temporary name, completed by a
// manifest (each file's size and CRC-32, written last) and renamed into place; then
// <root>/latest (the folder's name) is replaced atomically. A crash at any point leaves a
// complete checkpoint to load: `latest`'s, or, while a checkpoint of the same step was being
// replaced, the newest complete folder. Loading checks every file against the manifest, so a
// flipped bit or a truncated file is an error, not a silently different run.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace ft {

/// Writes a checkpoint of `model`, `optimizer` and `run_state` under root for `step`; returns
/// its folder.
std::string save_checkpoint(const std::string& root, int64_t step, const Module& model, const Optimizer& optimizer,
                            const std::map<std::string, std::string>& run_state);
/// The same with the optimizer's state taken already (Optimizer::state(): with ZeRO-1 a collective
/// every rank takes part in, while rank 0 alone writes).
std::string save_checkpoint(const std::string& root, int64_t step, const Module& model,
                            const std::map<std::string, Tensor>& optimizer_state,
                            const std::map<std::string, std::string>& run_state);

/// What a checkpoint holds beyond what one rank writes: state each rank holds its own part of
/// (sharded embedding tables, train/io/table_shards.h).
struct CheckpointShards {
  /// Files the ranks wrote into checkpoint_staging_folder(root, step) before rank 0 saves: the
  /// manifest lists them with the rest, and the folder is completed around them.
  std::vector<std::string> rank_files = {};
  /// The model's parameters whose names start with this are left out of model.safetensors
  /// (the rank files hold them); empty: none.
  std::string prefix = {};
};

/// The folder a checkpoint of `step` under root is written in until it is complete; with
/// `create`, made empty (a crashed save's leftovers removed) for the ranks' files.
std::string checkpoint_staging_folder(const std::string& root, int64_t step, bool create);
/// save_checkpoint around the ranks' files already in the staging folder.
std::string save_checkpoint(const std::string& root, int64_t step, const Module& model,
                            const std::map<std::string, Tensor>& optimizer_state,
                            const std::map<std::string, std::string>& run_state, const CheckpointShards& shards);

/// Loads the checkpoint folder `folder` (or, when `folder` is a root holding `latest`, the one it
/// names) into model and optimizer; returns its run state. Missing or mismatched tensors are an
/// ft::Error, except those under `shards_prefix` (non-empty), which the caller loads from the
/// rank files (train/io/table_shards.h).
std::map<std::string, std::string> load_checkpoint(const std::string& folder, Module& model, Optimizer& optimizer,
                                                   const std::string& shards_prefix = "");

/// The complete checkpoint folder `folder` names: itself, or under a root the one `latest`
/// names (the newest complete one when that is missing or incomplete).
std::string resolve_checkpoint_folder(const std::string& folder);

/// The run state of the checkpoint `folder` names (as load_checkpoint finds it), without loading
/// it: for checking, before anything is loaded, that it is this run's.
std::map<std::string, std::string> checkpoint_run_state(const std::string& folder);

/// Removes the complete checkpoints under root beyond the `keep_last` newest (never the one
/// `latest` names).
void prune_checkpoints(const std::string& root, int64_t keep_last);

/// For the save sequence's tests: the next save_checkpoint stops with an ft::Error right after
/// stage `stage` (1: files written, 2: manifest, 3: an older same-step folder removed, 4: renamed,
/// 5: latest updated), leaving the files as a crash there would. 0: off.
void simulate_checkpoint_crash_after(int stage);

}  // namespace ft
