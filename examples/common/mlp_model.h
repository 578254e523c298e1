// The mlp-fmnist model (BENCHMARKS.md), shared by ft-mlp, which trains it, and ft-bench mlp,
// which times its step: 784 -> hidden x layers -> 10, each hidden Linear followed by LayerNorm,
// GELU (tanh) and Dropout as one op (one kernel each way on CUDA in fused mode).
#pragma once
#include <cstdint>
#include <memory>

#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "lib/tensor.h"

namespace ft::cli {

inline std::shared_ptr<Sequential> build_mlp(int64_t hidden, int64_t layers, double dropout_p, uint64_t seed) {
  Generator gen(seed);
  auto model = std::make_shared<Sequential>();
  int64_t in = 784;
  for (int64_t i = 0; i < layers; ++i) {
    model->push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = hidden}, gen));
    model->push_back(std::make_shared<LayerNormActDropout>(hidden, Activation::GELU, dropout_p,
                                                           seed + 1000 + static_cast<uint64_t>(i)));
    in = hidden;
  }
  model->push_back(std::make_shared<Linear>(Linear::Options{.in = in, .out = 10}, gen));
  return model;
}

}  // namespace ft::cli
