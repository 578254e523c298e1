// AdamW (decoupled weight decay). Parameters stored in bf16 get an f32 master copy, so small
// updates are not lost to rounding; the bf16 copy is written from it. The master weights and
// both moments are flat buffers laid out like the gradients (optim/optimizer.h).
//
// Fused (CUDA, f32/bf16): one multi-tensor kernel chain reads gradient, master and both moments
// once and writes the moments, the master and the bf16 copy, with the clip factor, the skip
// flag, the learning rate and the bias corrections read from the device step state. The twin:
// every update is a chain of primitive ops per parameter, as PyTorch's for-loop AdamW runs.
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
    /// Gradient clipping and non-finite skipping.
    StepPolicy policy = {};
    /// Data parallelism: the buffers' padding and buckets, and ZeRO-1.
    DataPartition partition = {};
    /// Fused path only: round the bf16 working copy stochastically instead of to nearest.
    bool stochastic_rounding = false;
    uint64_t seed = 0;
  };
  AdamW(std::vector<Tensor> params, Options options);
  const Options& options() const { return options_; }

 private:
  /// "m" and "v" (Optimizer::state names them "<i>.m", "<i>.v").
  std::vector<std::pair<std::string, const std::vector<Tensor>*>> state_buffers() const override;
  void update() override;
  void update_twin(size_t k);

  struct Slot {    // piece k's state
    Tensor m, v;   // views of m_flats_ and v_flats_
    bool decay = true;
  };
  Options options_;
  std::vector<Tensor> m_flats_, v_flats_;
  std::vector<Slot> slots_;
};

}  // namespace ft
