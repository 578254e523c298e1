// Linear layer: y = act(x·Wᵀ + b) through the fused-op dispatch of lib/ops/linear/linear.h.
#pragma once
#include "layers/module.h"
#include "lib/ops/linear/linear.h"

namespace ft {

class Linear : public Module {
 public:
  struct Options {
    int64_t in = 0;
    int64_t out = 0;
    bool bias = true;
    Activation activation = Activation::None;
    /// false: weight and bias are allocated but left unset, for a model with its own scheme to
    /// write (GPT). Their draws are still reserved from gen, so whatever gen draws next is the
    /// same either way and a seed keeps naming the same model.
    bool init = true;
  };
  /// Weights uniform in ±1/√in (PyTorch's default), drawn from gen.
  Linear(Options options, Generator& gen);
  Tensor forward(const Tensor& x) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  Activation activation() const { return options_.activation; }

 private:
  Options options_;
  Tensor weight_, bias_;
};

}  // namespace ft
