// How every whole-step benchmark (gpt2, lora, mlp, dlrm) times a Trainer: warm-up steps first
// (the step's CUDA graph is captured at their end), then the timed steps, inside the profiler's
// window (ncu --profile-from-start off sees those alone) and with the peak memory over them.
#pragma once
#include <cstddef>

#include "train/loop/trainer.h"

namespace ft::bench {

struct TimedSteps {
  FitSummary summary;     // of the timed steps: step_ms is the median of CUDA events, wall_ms the wall clock
  size_t peak_bytes = 0;  // the pool's peak over the timed steps (and the graph's memory, when replayed)
};

/// Runs `warmup` untimed steps, then `steps` timed ones.
TimedSteps time_trainer_steps(Trainer& trainer, int warmup, int steps);

}  // namespace ft::bench
