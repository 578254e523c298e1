// LayerGather: what a model whose layers' parameters come and go calls around each layer. With
// ZeRO-3 (train/distributed/parameter_gather.h) a layer's parameters exist whole only while it
// runs: gathered from every rank's shard before its forward, and again before its backward.
#pragma once
#include <cstddef>

#include "lib/tensor.h"

namespace ft {

class LayerGather {
 public:
  virtual ~LayerGather() = default;
  /// Before layer `layer`'s forward (in layer order, each forward pass from layer 0): its
  /// parameters must be there when it runs, and the next layer's may be fetched meanwhile.
  virtual void before_layer(size_t layer) = 0;
  /// Each output of layer `layer`, passed through: when recording, an identity whose backward
  /// (which runs before any of the layer's own) brings the layer's parameters back.
  virtual Tensor after_layer(size_t layer, const Tensor& output) = 0;
};

}  // namespace ft
