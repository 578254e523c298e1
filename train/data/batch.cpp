#include "train/data/batch.h"

#include "lib/error.h"

namespace ft {

const Tensor& Batch::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string present;
    for (const auto& [key, tensor] : tensors_) present += (present.empty() ? "'" : ", '") + key + "'";
    FT_FAIL("batch: no tensor named '", name, "' (the batch holds ", present.empty() ? "nothing" : present, ")");
  }
  return it->second;
}

int64_t Batch::rows() const {
  if (tensors_.empty() || tensors_.begin()->second.dim() == 0) return 0;
  return tensors_.begin()->second.size(0);
}

Device Batch::device() const { return tensors_.empty() ? kCPU : tensors_.begin()->second.device(); }

}  // namespace ft
