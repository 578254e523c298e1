// LayerNorm over the last dim, with a learned gain (ones) and bias (zeros); and the MLP block's
// LayerNorm → activation → Dropout as one module over one fused op (layer_norm_act_dropout).
#pragma once
#include "layers/module.h"
#include "lib/ops/activation/activation.h"

namespace ft {

class Linear;

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;

 private:
  double eps_;
  Tensor weight_, bias_;
};

/// LayerNorm, then `act`, then dropout with probability p (in training mode; the Philox offset
/// is taken from the device's counter each call). Parameters named as LayerNorm's.
class LayerNormActDropout : public Module {
 public:
  LayerNormActDropout(int64_t dim, Activation act, double dropout_p, uint64_t seed, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  /// linear.forward(x), then this layer, as one op (linear_layer_norm_act_dropout: the norm's
  /// backward also gives the linear's bias gradient). The same parameters, dropout draws and
  /// results as the two forwards; `linear` must have no activation.
  Tensor forward_after(const Linear& linear, const Tensor& x);

 private:
  /// The dropout probability in the current mode, and the Philox offset for `elements` draws.
  double active_p() const { return is_training() ? p_ : 0.0; }
  Tensor take_offset(const Tensor& x, int64_t elements, double p) const;

  Activation act_;
  double p_, eps_;
  uint64_t seed_;
  Tensor weight_, bias_;
};

}  // namespace ft
