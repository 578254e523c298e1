// What a language-model run holds on each rank, before anything is allocated: the weights, the
// trained parameters' gradients, the optimizer state (f32 masters and moments, split over the
// ranks by --zero 1, the gradients by --zero 2, the layers' weights by --zero 3), and an estimate
// of the activations. ft-gpt2 prints it at start-up and alone with --dry-run, and refuses a run
// whose certain parts do not fit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/common/memory_check.h"
#include "examples/gpt2/model_family.h"
#include "lib/ops/recompute/recompute.h"

namespace ft::gpt2 {

struct RunSize {
  int64_t tokens = 0;  ///< B·T of one micro-step
  DType dtype = DType::F32;
  std::string optimizer = "adamw";
  double momentum = 0;
  int64_t lora_rank = 0;  ///< 0: every parameter trains
  std::vector<std::string> lora_targets;
  int world = 1;
  int zero = 0;  ///< --zero: 1 splits the optimizer state over the ranks, 2 the gradients too, 3 the weights
  int64_t accum = 1;       ///< --grad-accum
  double bucket_mb = 25;   ///< --bucket-mb: ZeRO-2's two staging slots are buckets
  Recompute recompute = Recompute::None;  ///< --recompute
};

/// Parameters the adapters add: rank × (in + out) for each targeted linear of every layer.
int64_t lora_parameter_count(const ModelChoice& model, const std::vector<std::string>& targets, int64_t rank);

/// The plan, part by part ("weights", "gradients", "optimizer state"), a rank's bytes.
cli::MemoryEstimate memory_plan(const ModelChoice& model, const RunSize& run);

}  // namespace ft::gpt2
