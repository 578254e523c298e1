// The mlp-fmnist model (docs/workloads.md), shared by ft-mlp, which trains it, and ft-bench mlp,
// which times its step: 784 -> hidden x layers -> 10, each hidden Linear followed by LayerNorm,
// GELU (tanh) and Dropout. A hidden Linear and the norm block after it run as one op
// (linear_layer_norm_act_dropout: on CUDA in fused mode the norm's backward also gives the
// linear's bias gradient); the children and their parameter names are a Sequential's ("0.weight",
// "1.weight", ...), so checkpoints are the same as the plain Sequential's.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "lib/tensor.h"

namespace ft::cli {

class MlpModel : public Sequential {
 public:
  MlpModel(int64_t hidden, int64_t layers, double dropout_p, uint64_t seed) {
    Generator gen(seed);
    int64_t in = 784;
    for (int64_t i = 0; i < layers; ++i) {
      auto linear = push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = hidden}, gen));
      auto norm = push_back(std::make_shared<LayerNormActDropout>(hidden, Activation::GELU, dropout_p,
                                                                  seed + 1000 + static_cast<uint64_t>(i)));
      hidden_.emplace_back(std::move(linear), std::move(norm));
      in = hidden;
    }
    classifier_ = push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = 10}, gen));
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& [linear, norm] : hidden_) h = norm->forward_after(*linear, h);
    return classifier_->forward(h);
  }

 private:
  std::vector<std::pair<std::shared_ptr<Linear>, std::shared_ptr<LayerNormActDropout>>> hidden_;
  std::shared_ptr<Linear> classifier_;
};

inline std::shared_ptr<Sequential> build_mlp(int64_t hidden, int64_t layers, double dropout_p, uint64_t seed) {
  return std::make_shared<MlpModel>(hidden, layers, dropout_p, seed);
}

}  // namespace ft::cli
