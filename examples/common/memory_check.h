// Before a binary allocates its model: what the run will hold, part by part, against what the
// device (or the host, for a CPU run) has free. The certain parts (weights, gradients, master
// weights, optimizer state, embedding tables) that do not fit stop the run at once with an error
// naming the sizes and the flags that shrink them, instead of the kernel's out-of-memory killer
// ending it without a word minutes later. Activations are an estimate: when they would not fit
// either, the run prints a note and goes on.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lib/error.h"
#include "lib/runtime.h"
#include "lib/tensor.h"

namespace ft::cli {

struct MemoryEstimate {
  std::vector<std::pair<std::string, double>> certain;  // (what, bytes)
  double activations = 0;                                // bytes, estimated
  double certain_bytes() const {
    double total = 0;
    for (const auto& part : certain) total += part.second;
    return total;
  }
  std::string parts() const {
    std::string out;
    for (const auto& [what, bytes] : certain)
      if (bytes > 0) out += (out.empty() ? "" : ", ") + what + " " + runtime::gigabytes(bytes);
    return out;
  }
};

/// What `device` has free now (0: unknown).
inline double memory_free_on(Device device) {
  return static_cast<double>(device.is_cuda() ? device_memory_free() : host_memory_available());
}

/// The plan on one line: each certain part, the activations' estimate, and what `device` has free.
inline std::string memory_plan_line(const MemoryEstimate& e, Device device) {
  const double free_bytes = memory_free_on(device);
  const std::string where = device.is_cuda() ? device.str() : std::string("the host");
  return e.parts() + ", activations about " + runtime::gigabytes(e.activations) + " (an estimate): " +
         runtime::gigabytes(e.certain_bytes() + e.activations) + " of " +
         (free_bytes > 0 ? runtime::gigabytes(free_bytes) : std::string("an unknown amount")) + " free on " + where;
}

/// `shrink` names the flags that make the run smaller.
inline void check_memory(const MemoryEstimate& e, Device device, const std::string& program, const std::string& shrink) {
  const double free_bytes = memory_free_on(device);
  if (free_bytes <= 0) return;  // unknown: nothing to check against
  const std::string where = device.is_cuda() ? device.str() : std::string("the host");
  FT_CHECK(e.certain_bytes() <= free_bytes, program, ": this run needs ", runtime::gigabytes(e.certain_bytes()), " on ",
           where, " before any activation (", e.parts(), "), and ", where, " has ", runtime::gigabytes(free_bytes),
           " free, ", runtime::gigabytes(e.certain_bytes() - free_bytes), " short: ", shrink);
  if (e.certain_bytes() + e.activations > free_bytes)
    std::printf("%s: note: with its activations (about %s) this run may not fit the %s free on %s\n", program.c_str(),
                runtime::gigabytes(e.activations).c_str(), runtime::gigabytes(free_bytes).c_str(), where.c_str());
}

/// Bytes a trained parameter costs beside its value: its gradient (f32), the f32 master of a
/// bf16 value, and the optimizer's moments (AdamW two, SGD with momentum one, f32).
inline double training_bytes_per_parameter(DType dtype, const std::string& optimizer, double momentum) {
  const double value = dtype == DType::BF16 ? 2 : 4, master = dtype == DType::BF16 ? 4 : 0;
  const double moments = optimizer == "adamw" ? 8 : (momentum > 0 ? 4 : 0);
  return value + 4 + master + moments;
}

}  // namespace ft::cli
