// Stateless layers: activations and dropout, so models compose as a Sequential.
#pragma once
#include "layers/module.h"

namespace ft {

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

/// Dropout with its own Philox stream: each training call reserves a fresh offset, so masks
/// never repeat; identity in eval mode.
class Dropout : public Module {
 public:
  Dropout(double p, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  Generator& generator() { return gen_; }

 private:
  double p_;
  Generator gen_;
};

}  // namespace ft
