#include "train/loop/step_timer.h"

#include <algorithm>
#include <chrono>

#include "lib/error.h"
#if FT_WITH_CUDA
#include "lib/cuda/runtime.h"
#endif

namespace ft {

struct StepTimer::Impl {
  Device device;
  using Clock = std::chrono::steady_clock;
  Clock::time_point cpu_start;
  std::vector<double> cpu_times;
#if FT_WITH_CUDA
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;  // recorded, not yet collected
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> spare;
  std::pair<cudaEvent_t, cudaEvent_t> open{};
#endif
};

StepTimer::StepTimer(Device device) : impl_(std::make_unique<Impl>()) { impl_->device = device; }

StepTimer::~StepTimer() {
#if FT_WITH_CUDA
  for (auto* list : {&impl_->events, &impl_->spare})
    for (auto& [a, b] : *list) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
#endif
}

void StepTimer::begin_step() {
#if FT_WITH_CUDA
  if (impl_->device.is_cuda()) {
    if (impl_->spare.empty()) {
      cudaEvent_t a, b;
      FT_CUDA_CHECK(cudaEventCreate(&a));
      FT_CUDA_CHECK(cudaEventCreate(&b));
      impl_->spare.emplace_back(a, b);
    }
    impl_->open = impl_->spare.back();
    impl_->spare.pop_back();
    FT_CUDA_CHECK(cudaEventRecord(impl_->open.first, cuda::stream()));
    return;
  }
#endif
  impl_->cpu_start = Impl::Clock::now();
}

void StepTimer::end_step() {
#if FT_WITH_CUDA
  if (impl_->device.is_cuda()) {
    FT_CUDA_CHECK(cudaEventRecord(impl_->open.second, cuda::stream()));
    impl_->events.push_back(impl_->open);
    return;
  }
#endif
  impl_->cpu_times.push_back(std::chrono::duration<double, std::milli>(Impl::Clock::now() - impl_->cpu_start).count());
}

std::vector<double> StepTimer::collect(size_t leave) {
  std::vector<double> out;
#if FT_WITH_CUDA
  if (impl_->device.is_cuda()) {
    const size_t take = impl_->events.size() > leave ? impl_->events.size() - leave : 0;
    for (size_t i = 0; i < take; ++i) {
      auto& pair = impl_->events[i];
      FT_CUDA_CHECK(cudaEventSynchronize(pair.second));
      float ms = 0;
      FT_CUDA_CHECK(cudaEventElapsedTime(&ms, pair.first, pair.second));
      out.push_back(ms);
      impl_->spare.push_back(pair);
    }
    impl_->events.erase(impl_->events.begin(), impl_->events.begin() + static_cast<std::ptrdiff_t>(take));
    return out;
  }
#endif
  std::vector<double>& times = impl_->cpu_times;
  const size_t take = times.size() > leave ? times.size() - leave : 0;
  out.assign(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(take));
  times.erase(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(take));
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace ft
