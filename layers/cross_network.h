// CrossNetwork: DCNv2's low-rank cross network (Wang et al. 2021; MLPerf DLRMv2's interaction,
// TorchRec's LowRankCrossNet): from x0 [B, W], layer l makes
//   x_{l+1} = x0 ⊙ (U_l · (V_l · x_l) + b_l) + x_l,
// V_l [r, W] and U_l [W, r] without biases (two Linear layers: cuBLASLt), then the bias, the
// product with x0 and the residual in one fused op (lib/ops/cross_term). The output [B, W] is
// x_L. Parameters per layer "<l>.v.weight", "<l>.u.weight" and "<l>.bias".
#pragma once
#include <memory>
#include <vector>

#include "layers/linear.h"
#include "layers/module.h"

namespace ft {

class CrossNetwork : public Module {
 public:
  struct Options {
    int64_t width = 0;  ///< W, the interaction's input width
    int64_t rank = 0;   ///< r, the low rank of each layer's product
    int64_t layers = 0;
  };
  /// V and U as Linear layers initialize them (uniform ±1/√in, from gen); the biases zero.
  CrossNetwork(Options options, Generator& gen);
  /// x0 [B, W] in any floating dtype the parameters have: x_L [B, W].
  Tensor forward(const Tensor& x0) override;
  /// Forward MACs per sample: 2·W·r a layer.
  double macs_per_sample() const {
    return 2.0 * static_cast<double>(options_.width * options_.rank * options_.layers);
  }
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<std::shared_ptr<Linear>> v_, u_;
  std::vector<Tensor> bias_;
};

}  // namespace ft
