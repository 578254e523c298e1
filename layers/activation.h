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

/// Dropout keyed on its seed and the device's Philox counter (PhiloxCounter): each training
/// call reserves fresh offsets on the device, so masks never repeat, also under graph replay;
/// identity in eval mode.
class Dropout : public Module {
 public:
  Dropout(double p, uint64_t seed);
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
  uint64_t seed_;
};

}  // namespace ft
