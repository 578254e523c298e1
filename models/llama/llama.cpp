#include "models/llama/llama.h"

#include <algorithm>

#include "lib/error.h"
#include "lib/ops/attention/attention.h"
#include "lib/ops/bias_act/bias_act.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear_cross_entropy/linear_cross_entropy.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/norm/rms_norm.h"
#include "lib/ops/recompute/recompute.h"
#include "lib/ops/swiglu_linear/swiglu_linear.h"

namespace ft {

namespace {

/// A bias-free linear with weights N(0, 0.02²), as transformers initializes Llama's.
std::shared_ptr<Linear> llama_linear(int64_t in, int64_t out, Generator& gen) {
  auto linear = std::make_shared<Linear>(Linear::Options{.in = in, .out = out, .bias = false, .init = false}, gen);
  linear->weight().copy_(Tensor::normal({out, in}, gen, 0.02));
  return linear;
}

}  // namespace

void LlamaConfig::check() const {
  FT_CHECK(vocab > 0 && hidden > 0 && intermediate > 0 && layers >= 0 && heads > 0 && kv_heads > 0 &&
               max_positions > 0 && rms_eps > 0,
           "Llama: vocab, hidden, intermediate, heads, kv_heads, max_positions and rms_eps must be positive (got ",
           vocab, ", ", hidden, ", ", intermediate, ", ", heads, ", ", kv_heads, ", ", max_positions, ", ", rms_eps,
           ")");
  FT_CHECK(heads % kv_heads == 0, "Llama: ", heads, " query heads do not split into groups of ", kv_heads,
           " key/value heads");
  FT_CHECK(head_dim > 0 || hidden % heads == 0, "Llama: hidden size ", hidden, " does not split into ", heads,
           " heads (give head_dim)");
  FT_CHECK(head_size() % 2 == 0, "Llama: rotary embeddings need an even head size, got ", head_size());
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& config, Generator& gen) : config_(config) {
  const int64_t c = config.hidden, hs = config.head_size();
  input_norm_ = register_parameter("input_layernorm.weight", Tensor::full({c}, 1.0));
  q_proj_ = register_module("self_attn.q_proj", llama_linear(c, config.heads * hs, gen));
  k_proj_ = register_module("self_attn.k_proj", llama_linear(c, config.kv_heads * hs, gen));
  v_proj_ = register_module("self_attn.v_proj", llama_linear(c, config.kv_heads * hs, gen));
  o_proj_ = register_module("self_attn.o_proj", llama_linear(config.heads * hs, c, gen));
  post_attention_norm_ = register_parameter("post_attention_layernorm.weight", Tensor::full({c}, 1.0));
  gate_proj_ = register_module("mlp.gate_proj", llama_linear(c, config.intermediate, gen));
  up_proj_ = register_module("mlp.up_proj", llama_linear(c, config.intermediate, gen));
  down_proj_ = register_module("mlp.down_proj", llama_linear(config.intermediate, c, gen));
}

const std::vector<std::string>& Llama::lora_targets() {
  static const std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};
  return targets;
}

void LlamaDecoderLayer::add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, Generator& gen) {
  // In the order of Llama::lora_targets(), with their module paths in the layer.
  std::shared_ptr<Module>* const members[] = {&q_proj_, &k_proj_, &v_proj_, &o_proj_, &gate_proj_, &up_proj_, &down_proj_};
  const char* const paths[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  for (size_t i = 0; i < Llama::lora_targets().size(); ++i) {
    if (std::find(targets.begin(), targets.end(), Llama::lora_targets()[i]) == targets.end()) continue;
    const auto base = std::dynamic_pointer_cast<Linear>(*members[i]);
    FT_CHECK(base != nullptr, "Llama::add_lora: ", Llama::lora_targets()[i], " has an adapter already");
    *members[i] = std::make_shared<LoRALinear>(base, config, gen);
    replace_module(paths[i], *members[i]);
  }
}

Tensor LlamaDecoderLayer::attend(const Tensor& normed) {
  // The attention op turns q and k by RoPE first.
  return grouped_query_attention(q_proj_->forward(normed), k_proj_->forward(normed), v_proj_->forward(normed),
                                 config_.heads, config_.kv_heads, /*causal=*/true, config_.rope);
}

namespace {
/// The Linear behind a projection when it is a plain one (no adapter, bias or activation).
std::shared_ptr<Linear> plain_linear(const std::shared_ptr<Module>& projection) {
  auto linear = std::dynamic_pointer_cast<Linear>(projection);
  return linear && !linear->bias().defined() && linear->activation() == Activation::None ? linear : nullptr;
}
}  // namespace

Tensor LlamaDecoderLayer::mlp(const Tensor& normed) {
  const Tensor gate = gate_proj_->forward(normed), up = up_proj_->forward(normed);
  // A plain down projection takes silu(gate)·up without keeping it for backward (swiglu_linear
  // makes it again there); a LoRA one needs it kept for its adapter anyway.
  if (const auto down = plain_linear(down_proj_)) return swiglu_linear(gate, up, down->weight());
  return down_proj_->forward(swiglu(gate, up));
}

LlamaDecoderLayer::Output LlamaDecoderLayer::forward_block(const Tensor& residual, const Tensor& pending) {
  const double eps = config_.rms_eps;
  // The layer's input is residual + pending, added by the input norm's kernel when pending is there.
  AddNormResult in{residual, Tensor()};
  if (pending.defined())
    in = add_rms_norm(pending, residual, input_norm_, eps);
  else
    in.out = rms_norm(residual, input_norm_, eps);
  const AddNormResult mid = add_rms_norm(o_proj_->forward(attend(in.out)), in.sum, post_attention_norm_, eps);
  return {mid.sum, mlp(mid.out)};
}

Tensor LlamaDecoderLayer::forward(const Tensor& x) {
  const Output out = forward_block(x, Tensor());
  return out.residual + out.pending;
}

Llama::Llama(const LlamaConfig& config, uint64_t seed) : config_(config) {
  config.check();
  Generator gen(seed);
  embed_ = register_module("model.embed_tokens", std::make_shared<Embedding>(config.vocab, config.hidden, gen, 0.02));
  for (int64_t l = 0; l < config.layers; ++l)
    layers_.push_back(
        register_module("model.layers." + std::to_string(l), std::make_shared<LlamaDecoderLayer>(config, gen)));
  norm_ = register_parameter("model.norm.weight", Tensor::full({config.hidden}, 1.0));
  if (!config.tie_embeddings) lm_head_ = register_module("lm_head", llama_linear(config.hidden, config.vocab, gen));
}

void Llama::add_lora(const LoRAConfig& config, const std::vector<std::string>& targets, uint64_t seed) {
  config.check();
  check_lora_targets(targets, lora_targets(), "Llama::add_lora");
  set_trainable(false);
  Generator gen(seed);
  for (auto& layer : layers_) layer->add_lora(config, targets, gen);
}

std::map<std::string, Tensor> Llama::lora_state_dict() const { return lora_parameters(*this); }

LlamaConfig LlamaConfig::llama_3_2_1b(int64_t vocab) {
  return {.vocab = vocab, .hidden = 2048, .intermediate = 8192, .layers = 16, .heads = 32, .kv_heads = 8,
          .max_positions = 131072, .rms_eps = 1e-5,
          .rope = {.theta = 500000.0, .factor = 32.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                   .original_max_position = 8192},
          .tie_embeddings = true};
}

LlamaConfig LlamaConfig::llama_3_1_8b(int64_t vocab) {
  return {.vocab = vocab, .hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
          .max_positions = 131072, .rms_eps = 1e-5,
          .rope = {.theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                   .original_max_position = 8192},
          .tie_embeddings = false};
}

int64_t LlamaConfig::parameter_count() const {
  const int64_t c = hidden, hs = head_size();
  // A layer: q and o (C·NH·HS each), k and v (C·NKV·HS each), gate, up and down (C·I each), two norms.
  const int64_t layer = 2 * c * heads * hs + 2 * c * kv_heads * hs + 3 * c * intermediate + 2 * c;
  return vocab * c * (tie_embeddings ? 1 : 2) + layers * layer + c;
}

CausalLMShape Llama::shape() const { return shape_of(config_); }

std::vector<std::vector<Tensor>> Llama::layer_parameters() const {
  std::vector<std::vector<Tensor>> out;
  for (const auto& layer : layers_) out.push_back(layer->parameters());
  return out;
}

CausalLMShape Llama::shape_of(const LlamaConfig& c) {
  return {.family = "llama", .layers = c.layers, .width = c.hidden, .heads = c.heads, .kv_heads = c.kv_heads,
          .attention_width = c.heads * c.head_size(), .vocab = c.vocab, .max_seq = c.max_positions,
          .parameters = c.parameter_count()};
}

const Tensor& Llama::head_weight() const { return lm_head_ ? lm_head_->weight() : embed_->weight(); }

Tensor Llama::hidden(const Tensor& ids) {
  FT_CHECK(ids.dim() == 2, "Llama: ids must be [B, T], got ", shape_str(ids.shape()));
  FT_CHECK(ids.size(1) <= config_.max_positions, "Llama: sequence length ", ids.size(1), " exceeds max_positions ",
           config_.max_positions);
  if (recompute_ != Recompute::None) {  // each layer whole, run again in backward
    Tensor x = embed_->forward(ids);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const auto& layer = layers_[i];
      enter_layer(i);
      x = recompute([layer](const Tensor& in) { return layer->forward(in); }, x, layer->parameters(), recompute_);
      x = leave_layer(i, x);
    }
    return rms_norm(x, norm_, config_.rms_eps);
  }
  // Each layer's last residual add is left to the next norm's kernel (add_rms_norm).
  LlamaDecoderLayer::Output x{embed_->forward(ids), Tensor()};
  for (size_t i = 0; i < layers_.size(); ++i) {
    enter_layer(i);
    x = layers_[i]->forward_block(x.residual, x.pending);
    x = {leave_layer(i, x.residual), leave_layer(i, x.pending)};
  }
  return x.pending.defined() ? add_rms_norm(x.pending, x.residual, norm_, config_.rms_eps).out
                             : rms_norm(x.residual, norm_, config_.rms_eps);
}

Tensor Llama::logits(const Tensor& ids) { return matmul(hidden(ids), head_weight(), false, true); }

Tensor Llama::loss(const Tensor& ids, const Tensor& targets) {
  FT_CHECK(targets.shape() == ids.shape(), "Llama: targets ", shape_str(targets.shape()), " must match ids ",
           shape_str(ids.shape()));
  const Tensor h = hidden(ids);
  const int64_t n = ids.numel();
  return linear_cross_entropy(h.reshape({n, config_.hidden}), head_weight(), targets.reshape({n}));
}

}  // namespace ft
