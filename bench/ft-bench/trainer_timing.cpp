#include "bench/ft-bench/trainer_timing.h"

#include "lib/runtime.h"

namespace ft::bench {

TimedSteps time_trainer_steps(Trainer& trainer, int warmup, int steps) {
  trainer.fit(warmup);
  synchronize();
  reset_peak_memory();
  profiler_start();
  TimedSteps timed{.summary = trainer.fit(warmup + steps)};
  profiler_stop();
  timed.peak_bytes = peak_memory();
  return timed;
}

}  // namespace ft::bench
