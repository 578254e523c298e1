// Training checkpoints: the model's parameters (safetensors, by parameter name, loadable by
// PyTorch's `safetensors`), the optimizer state beside them, and run state (step, data position,
// anything the caller adds) as metadata.
//
// Each checkpoint is a folder <root>/step_<N>/ written under a temporary name and renamed into
// place, then <root>/latest (the folder's name) is replaced atomically: a crash at any point
// leaves the previous checkpoint intact and `latest` naming a complete one.
#pragma once
#include <map>
#include <string>

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

/// Loads the checkpoint folder `folder` (or, when `folder` is a root holding `latest`, the one it
/// names) into model and optimizer; returns its run state. Missing or mismatched tensors are an
/// ft::Error.
std::map<std::string, std::string> load_checkpoint(const std::string& folder, Module& model, Optimizer& optimizer);

}  // namespace ft
