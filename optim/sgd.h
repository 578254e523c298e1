// SGD with momentum and optional weight decay, per-tensor primitive updates (the twin):
// buf = momentum·buf + (g + wd·p);  p -= lr·buf.
#pragma once
#include "optim/optimizer.h"

namespace ft {

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double weight_decay = 0.0;
  };
  SGD(std::vector<Tensor> params, Options options);
  void step() override;

 private:
  Options options_;
  std::vector<Tensor> momentum_;
};

}  // namespace ft
