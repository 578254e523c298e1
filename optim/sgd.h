// SGD with momentum and optional weight decay: buf = momentum·buf + (g + wd·p); p −= lr·buf
// (buf = g + wd·p on the first step, as PyTorch's). bf16 parameters get an f32 master copy.
//
// Fused (CUDA, f32/bf16): one multi-tensor kernel chain; the twin: per-tensor primitive ops.
// Both read the learning rate, the clip factor and the skip flag from the device step state.
#pragma once
#include "optim/optimizer.h"

namespace ft {

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double weight_decay = 0.0;
    StepPolicy policy = {};
  };
  SGD(std::vector<Tensor> params, Options options);
  const Options& options() const { return options_; }

 private:
  void update() override;
  /// "momentum", when momentum is on.
  std::vector<std::pair<std::string, Tensor>> moments(size_t i) const override;
  void update_twin(size_t i);

  struct Slot {
    Tensor master;    // the parameter itself when f32/f64, an f32 copy of a bf16 one
    Tensor momentum;  // a view of momentum_flats_ (zeros until the first step); undefined without momentum
  };
  Options options_;
  std::vector<Tensor> momentum_flats_;
  std::vector<Slot> slots_;
};

}  // namespace ft
