// Sequential: runs its children in order, each on the previous one's output.
#pragma once
#include <memory>
#include <vector>

#include "layers/module.h"

namespace ft {

class Sequential : public Module {
 public:
  /// Appends a child named by its position ("0", "1", ...).
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    layers_.push_back(module);
    return register_module(std::to_string(layers_.size() - 1), std::move(module));
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace ft
