#include "models/dlrm/dlrm.h"

#include <cmath>
#include <string>

#include "lib/error.h"
#include "lib/ops/dot_interaction/dot_interaction.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

namespace {

std::shared_ptr<Linear> dlrm_linear(int64_t in, int64_t out, Activation act, Generator& gen) {
  auto layer = std::make_shared<Linear>(Linear::Options{.in = in, .out = out, .activation = act, .init = false}, gen);
  NoGradGuard no_grad;
  layer->weight().copy_(Tensor::normal({out, in}, gen, std::sqrt(2.0 / static_cast<double>(in + out))));
  layer->bias().copy_(Tensor::normal({out}, gen, std::sqrt(1.0 / static_cast<double>(out))));
  return layer;
}

}  // namespace

DLRM::DLRM(Options options, Generator& gen) : options_(std::move(options)) {
  FT_CHECK(!options_.bottom.empty() && !options_.top.empty(), "DLRM: the bottom and top MLPs need at least one layer");
  FT_CHECK(options_.bottom.back() == options_.tables.dim, "DLRM: the bottom MLP must end at D = ", options_.tables.dim,
           " (the tables' width), it ends at ", options_.bottom.back());
  FT_CHECK(options_.top.back() == 1, "DLRM: the top MLP must end at one logit, it ends at ", options_.top.back());
  int64_t in = options_.dense_features;
  for (size_t i = 0; i < options_.bottom.size(); ++i) {
    bottom_.push_back(register_module("bottom." + std::to_string(i),
                                      dlrm_linear(in, options_.bottom[i], Activation::ReLU, gen)));
    in = options_.bottom[i];
  }
  tables_ = options_.sharding
                ? register_module<PooledTables>(
                      "tables", std::make_shared<ShardedEmbeddingBags>(options_.tables, *options_.sharding, options_.rank, gen))
                : register_module<PooledTables>("tables", std::make_shared<EmbeddingBagCollection>(options_.tables, gen));
  in = interaction_width();
  if (options_.interaction == Interaction::Cross)
    cross_ = register_module("cross", std::make_shared<CrossNetwork>(
                                          CrossNetwork::Options{.width = in,
                                                                .rank = options_.cross_rank,
                                                                .layers = options_.cross_layers},
                                          gen));
  for (size_t i = 0; i < options_.top.size(); ++i) {
    const bool last = i + 1 == options_.top.size();
    top_.push_back(register_module("top." + std::to_string(i),
                                   dlrm_linear(in, options_.top[i], last ? Activation::None : Activation::ReLU, gen)));
    in = options_.top[i];
  }
}


Tensor DLRM::logits(const Tensor& dense, const Tensor& sparse_ids) {
  const DType dtype = bottom_.front()->weight().dtype();
  FT_CHECK(dense.dim() == 2 && dense.size(1) == options_.dense_features && sparse_ids.dim() == 2 &&
               sparse_ids.size(0) == dense.size(0) && sparse_ids.size(1) == tables_->tables(),
           "DLRM: dense features must be [B, ", options_.dense_features, "] and sparse ids [B, ", tables_->tables(),
           "], got ", shape_str(dense.shape()), " and ", shape_str(sparse_ids.shape()));
  Tensor x = dense.dtype() == dtype ? dense : cast(dense, dtype);
  // The tables first: sharded ones exchange their vectors while the bottom MLP runs.
  const std::function<Tensor()> finish_lookup = tables_->start_one_hot(sparse_ids, dtype);
  for (const auto& layer : bottom_) x = layer->forward(x);
  const Tensor pooled = finish_lookup();
  const int64_t b = dense.size(0), tables = tables_->tables(), dim = options_.tables.dim;
  Tensor z = cross_ ? cross_->forward(cat({x, pooled.reshape({b, tables * dim})}, 1)) : dot_interaction(x, pooled);
  for (const auto& layer : top_) z = layer->forward(z);
  return z.reshape({dense.size(0)});
}

std::vector<Tensor> DLRM::dense_parameters() const {
  std::vector<Tensor> out;
  for (const auto& list : {&bottom_, &top_})
    for (const auto& layer : *list)
      for (const Tensor& p : layer->parameters()) out.push_back(p);
  if (cross_)
    for (const Tensor& p : cross_->parameters()) out.push_back(p);
  return out;
}

double DLRM::flops_per_sample() const {
  double macs = 0;
  for (const auto& list : {&bottom_, &top_})
    for (const auto& layer : *list) macs += static_cast<double>(layer->weight().numel());
  if (cross_) {
    macs += cross_->macs_per_sample();
  } else {
    const double features = static_cast<double>(tables_->tables() + 1);
    macs += features * (features - 1) / 2 * static_cast<double>(options_.tables.dim);
  }
  return 6.0 * macs;  // forward 2·MACs, backward 4·MACs
}

}  // namespace ft
