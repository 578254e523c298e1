// Times training steps without stalling them: on CUDA each step is bracketed by events on the
// compute stream and read only when results are collected; on the CPU a steady clock is
// exact because the work is synchronous.
#pragma once
#include <memory>
#include <vector>

#include "lib/dtype.h"

namespace ft {

class StepTimer {
 public:
  explicit StepTimer(Device device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void begin_step();
  void end_step();
  /// Milliseconds of every step since the last collect (waits for the device), in order, except
  /// the last `leave` steps, which stay for the next collect (steps still running).
  std::vector<double> collect(size_t leave = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The median of a list of times (0 for an empty list).
double median(std::vector<double> values);

}  // namespace ft
