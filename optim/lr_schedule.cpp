#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ft {

double LRSchedule::at(int64_t step) const {
  if (kind == Kind::Constant) return max_lr;
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ft
