// Learning-rate schedules as pure functions of the step (0-based).
#pragma once
#include <cstdint>

namespace ft {

struct LRSchedule {
  enum class Kind { Constant, WarmupCosine } kind = Kind::Constant;
  double max_lr = 1e-3;
  int64_t warmup_steps = 0;  // linear from max_lr / warmup_steps up to max_lr
  int64_t total_steps = 0;   // cosine decays to min_lr at total_steps
  double min_lr = 0.0;

  double at(int64_t step) const;
};

}  // namespace ft
