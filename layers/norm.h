// LayerNorm over the last dim, with a learned gain (ones) and bias (zeros).
#pragma once
#include "layers/module.h"

namespace ft {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;

 private:
  double eps_;
  Tensor weight_, bias_;
};

}  // namespace ft
