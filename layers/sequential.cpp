#include "layers/sequential.h"

namespace ft {

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace ft
