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
    /// Data parallelism: the buffers' padding and buckets, and ZeRO-1.
    DataPartition partition = {};
  };
  SGD(std::vector<Tensor> params, Options options);
  const Options& options() const { return options_; }

 private:
  void update() override;
  /// "momentum", when momentum is on.
  std::vector<std::pair<std::string, const std::vector<Tensor>*>> state_buffers() const override;
  void update_twin(size_t k);

  Options options_;
  std::vector<Tensor> momentum_flats_;
  std::vector<Tensor> momentum_;  // piece k's view of momentum_flats_; empty without momentum
};

}  // namespace ft
