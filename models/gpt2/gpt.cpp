#include "models/gpt2/gpt.h"

#include <algorithm>
#include <cmath>

#include "lib/error.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding/embedding.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/ops/linear_norm/linear_norm.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/recompute/recompute.h"

namespace ft {

namespace {

// GPT-2's initialization: N(0, 0.02²) weights, zero biases; projections that write into the
// residual stream scaled by 1/√(2L) so the stream's variance does not grow with depth. The
// Linears are built with init = false, so their own uniform draws are reserved but never made.
void init_linear(Module& module, Generator& gen, double std) {
  const Linear& layer = dynamic_cast<const Linear&>(module);
  layer.weight().assign_(Tensor::normal(layer.weight().shape(), gen, std));
  if (layer.bias().defined()) layer.bias().fill_(0.0);
}

}  // namespace

GPTBlock::GPTBlock(const GPTConfig& config, Generator& gen) : config_(config) {
  const int64_t c = config.channels;
  FT_CHECK(c % config.heads == 0, "GPT: channels ", c, " must divide into ", config.heads, " heads");
  ln1_w_ = register_parameter("ln_1.weight", Tensor::full({c}, 1.0));
  ln1_b_ = register_parameter("ln_1.bias", Tensor::zeros({c}));
  qkv_ = register_module("attn.c_attn",
                         std::make_shared<Linear>(Linear::Options{.in = c, .out = 3 * c, .init = false}, gen));
  attn_proj_ = register_module("attn.c_proj",
                               std::make_shared<Linear>(Linear::Options{.in = c, .out = c, .init = false}, gen));
  ln2_w_ = register_parameter("ln_2.weight", Tensor::full({c}, 1.0));
  ln2_b_ = register_parameter("ln_2.bias", Tensor::zeros({c}));
  fc_ = register_module("mlp.c_fc", std::make_shared<Linear>(Linear::Options{.in = c, .out = 4 * c,
                                                                             .activation = Activation::GELU,
                                                                             .init = false},
                                                             gen));
  mlp_proj_ = register_module("mlp.c_proj",
                              std::make_shared<Linear>(Linear::Options{.in = 4 * c, .out = c, .init = false}, gen));
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  init_linear(*qkv_, gen, 0.02);
  init_linear(*attn_proj_, gen, residual_std);
  init_linear(*fc_, gen, 0.02);
  init_linear(*mlp_proj_, gen, residual_std);
}

Tensor GPTBlock::attend(const Tensor& x) {
  // The fused kernel reads the heads straight out of the [B, T, 3C] projection and writes
  // [B, T, C] for the output projection: no split or merge copies. A plain Linear projection
  // runs with it as one op, whose attention backward gives the projection its bias gradient.
  if (const auto* linear = dynamic_cast<const Linear*>(qkv_.get()); linear && linear->activation() == Activation::None)
    return qkv_attention(x, linear->weight(), linear->bias(), config_.heads, /*causal=*/true);
  return attention_qkv(qkv_->forward(x), config_.heads, /*causal=*/true);
}

AddNormResult project_add_layer_norm(const PendingProjection& pending, const Tensor& residual, const Tensor& weight,
                                     const Tensor& bias) {
  if (const auto* linear = dynamic_cast<const Linear*>(pending.proj); linear && linear->activation() == Activation::None)
    return linear_add_layer_norm(pending.input, linear->weight(), linear->bias(), residual, weight, bias);
  return add_layer_norm(pending.proj->forward(pending.input), residual, weight, bias);
}

const std::vector<std::pair<std::string, std::string>>& GPT::lora_targets() {
  static const std::vector<std::pair<std::string, std::string>> targets = {
      {"qkv", "attn.c_attn"}, {"attn_proj", "attn.c_proj"}, {"fc", "mlp.c_fc"}, {"mlp_proj", "mlp.c_proj"}};
  return targets;
}

void GPTBlock::add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, Generator& gen) {
  // In the order of GPT::lora_targets().
  std::shared_ptr<Module>* const members[] = {&qkv_, &attn_proj_, &fc_, &mlp_proj_};
  for (size_t i = 0; i < GPT::lora_targets().size(); ++i) {
    const auto& [target, path] = GPT::lora_targets()[i];
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) continue;
    const auto base = std::dynamic_pointer_cast<Linear>(*members[i]);
    FT_CHECK(base != nullptr, "GPT::add_lora: ", target, " has an adapter already");
    *members[i] = std::make_shared<LoRALinear>(base, config, gen);
    replace_module(path, *members[i]);
  }
}

void GPT::check_lora_targets(const std::vector<std::string>& targets, const std::string& who) {
  std::vector<std::string> names;
  for (const auto& [name, path] : lora_targets()) names.push_back(name);
  ft::check_lora_targets(targets, names, who);
}

void GPT::add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, uint64_t seed) {
  config.check();
  check_lora_targets(targets, "GPT::add_lora");
  set_trainable(false);
  Generator gen(seed);
  for (auto& block : blocks_) block->add_lora(config, targets, gen);
}

std::map<std::string, Tensor> GPT::lora_state_dict() const { return lora_parameters(*this); }

std::vector<std::string> GPT::lora_target_names() const {
  std::vector<std::string> names;
  for (const auto& [name, path] : lora_targets()) names.push_back(name);
  return names;
}

int64_t GPTConfig::parameter_count() const {
  // Token and position embeddings; a block's two LayerNorms (2C each), attention (C·3C + 3C and
  // C·C + C) and MLP (C·4C + 4C and 4C·C + C); the final LayerNorm.
  return (vocab + block_size) * channels + layers * (12 * channels * channels + 13 * channels) + 2 * channels;
}

CausalLMShape GPT::shape() const { return shape_of(config_); }

std::vector<std::vector<Tensor>> GPT::layer_parameters() const {
  std::vector<std::vector<Tensor>> out;
  for (const auto& block : blocks_) out.push_back(block->parameters());
  return out;
}

CausalLMShape GPT::shape_of(const GPTConfig& c) {
  return {.family = "gpt2", .layers = c.layers, .width = c.channels, .heads = c.heads, .kv_heads = c.heads,
          .attention_width = c.channels, .vocab = c.vocab, .max_seq = c.block_size,
          .parameters = c.parameter_count()};
}

std::pair<Tensor, PendingProjection> GPTBlock::forward_block(const Tensor& residual,
                                                            const PendingProjection& pending) {
  Tensor stream = residual, normed;
  if (pending.proj) {
    AddNormResult r = project_add_layer_norm(pending, residual, ln1_w_, ln1_b_);
    stream = r.sum;
    normed = r.out;
  } else {
    normed = layer_norm(residual, ln1_w_, ln1_b_);
  }
  AddNormResult r2 = project_add_layer_norm({attn_proj_.get(), attend(normed)}, stream, ln2_w_, ln2_b_);
  return {r2.sum, {mlp_proj_.get(), fc_->forward(r2.out)}};
}

Tensor GPTBlock::forward(const Tensor& x) {
  auto [residual, pending] = forward_block(x, {});
  return residual + pending.proj->forward(pending.input);
}

GPT::GPT(const GPTConfig& config, uint64_t seed) : config_(config) {
  Generator gen(seed);
  wte_ = register_module("wte", std::make_shared<Embedding>(config.vocab, config.channels, gen));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(config.block_size, config.channels, gen, 0.01));
  for (int64_t l = 0; l < config.layers; ++l)
    blocks_.push_back(register_module("h." + std::to_string(l), std::make_shared<GPTBlock>(config, gen)));
  lnf_w_ = register_parameter("ln_f.weight", Tensor::full({config.channels}, 1.0));
  lnf_b_ = register_parameter("ln_f.bias", Tensor::zeros({config.channels}));
}

Tensor GPT::hidden(const Tensor& ids) {
  FT_CHECK(ids.dim() == 2, "GPT: ids must be [B, T], got ", shape_str(ids.shape()));
  const int64_t t = ids.size(1);
  FT_CHECK(t <= config_.block_size, "GPT: sequence length ", t, " exceeds block_size ", config_.block_size);
  Tensor residual = token_position_embedding(ids, wte_->weight(), wpe_->weight());
  // Each block whole: run again in backward, or (ZeRO-3) using no parameter of another block,
  // whose parameters may be gone by then: the MLP projection is not left to the next block.
  if (recompute_ != Recompute::None || gather_) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const auto& block = blocks_[i];
      enter_layer(i);
      residual = recompute_ == Recompute::None
                     ? block->forward(residual)
                     : recompute([block](const Tensor& in) { return block->forward(in); }, residual,
                                 block->parameters(), recompute_);
      residual = leave_layer(i, residual);
    }
    return layer_norm(residual, lnf_w_, lnf_b_);
  }
  PendingProjection pending;
  for (auto& block : blocks_) std::tie(residual, pending) = block->forward_block(residual, pending);
  if (!pending.proj) return layer_norm(residual, lnf_w_, lnf_b_);  // no blocks
  return project_add_layer_norm(pending, residual, lnf_w_, lnf_b_).out;
}

Tensor GPT::logits(const Tensor& ids) { return matmul(hidden(ids), wte_->weight(), false, true); }

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  FT_CHECK(targets.shape() == ids.shape(), "GPT: targets ", shape_str(targets.shape()), " must match ids ",
           shape_str(ids.shape()));
  Tensor h = hidden(ids);
  const int64_t n = ids.numel();
  return linear_cross_entropy(h.reshape({n, config_.channels}), wte_->weight(), targets.reshape({n}));
}

}  // namespace ft
