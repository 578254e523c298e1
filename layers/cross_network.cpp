#include "layers/cross_network.h"

#include <string>

#include "lib/error.h"
#include "lib/ops/cross_term/cross_term.h"

namespace ft {

namespace {

/// One of a cross layer's two products: a Linear without bias.
std::shared_ptr<Linear> product(int64_t in, int64_t out, Generator& gen) {
  return std::make_shared<Linear>(Linear::Options{.in = in, .out = out, .bias = false}, gen);
}

}  // namespace

CrossNetwork::CrossNetwork(Options options, Generator& gen) : options_(options) {
  FT_CHECK(options_.width > 0 && options_.rank > 0 && options_.layers > 0,
           "CrossNetwork: width, rank and layers must be positive, got ", options_.width, ", ", options_.rank, " and ",
           options_.layers);
  for (int64_t l = 0; l < options_.layers; ++l) {
    const std::string name = std::to_string(l);
    v_.push_back(register_module(name + ".v", product(options_.width, options_.rank, gen)));
    u_.push_back(register_module(name + ".u", product(options_.rank, options_.width, gen)));
    bias_.push_back(register_parameter(name + ".bias", Tensor::zeros({options_.width}, DType::F32)));
  }
}

Tensor CrossNetwork::forward(const Tensor& x0) {
  FT_CHECK(x0.dim() == 2 && x0.size(1) == options_.width, "CrossNetwork: x0 must be [B, ", options_.width, "], got ",
           shape_str(x0.shape()));
  Tensor x = x0;
  for (size_t l = 0; l < v_.size(); ++l) x = cross_term(x0, u_[l]->forward(v_[l]->forward(x)), bias_[l], x);
  return x;
}

}  // namespace ft
