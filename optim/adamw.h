// AdamW (decoupled weight decay), the per-tensor twin: every update is a chain of primitive
// ops per parameter, as PyTorch's for-loop AdamW runs. Parameters stored in bf16 get an f32
// master copy, so small updates are not lost to rounding; the bf16 copy is refreshed from it.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "optim/optimizer.h"

namespace ft {

class AdamW : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;
    /// Which parameters decay; default: those with 2 or more dims (not biases or norm gains).
    std::function<bool(const Tensor&)> decays = {};
  };
  AdamW(std::vector<Tensor> params, Options options);
  void step() override;
  const Options& options() const { return options_; }
  /// The per-parameter state as named tensors ("<i>.m", "<i>.v", "<i>.master" for parameter i),
  /// for checkpoints; load_state restores it (shapes must match, every name must be present).
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  struct State {
    Tensor master;  // f32 (f64 for f64 params); the parameter itself when already that dtype
    Tensor m, v;
    bool decay = true;
  };
  Options options_;
  std::vector<State> state_;
};

}  // namespace ft
