// The Llama model against a reference written here in plain loops in f64, from the definition
// transformers' LlamaForCausalLM implements: RMSNorm, rotate-half RoPE with Llama 3's scaled
// frequencies, grouped-query causal attention (query head h reads key/value head h / group),
// SwiGLU, the final norm and the tied or untied head. Then finite differences of the loss
// against backward, and the config's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lib/autograd.h"
#include "models/llama/llama.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using test::error_mentions;
using Vec = std::vector<double>;

LlamaConfig tiny(bool tied) {
  return {.vocab = 23, .hidden = 16, .intermediate = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 6,
          .max_positions = 16, .rms_eps = 1e-5,
          .rope = {.theta = 500.0, .factor = 4.0, .low_freq_factor = 1.0, .high_freq_factor = 2.0,
                   .original_max_position = 8},
          .tie_embeddings = tied};
}

/// The loss of one batch computed straight from the definition, with the model's weights.
class Reference {
 public:
  Reference(const LlamaConfig& c, const std::map<std::string, Tensor>& state) : c_(c) {
    for (const auto& [name, t] : state) w_[name] = t.to_vector();
  }

  double loss(const std::vector<int>& ids, const std::vector<int>& targets, int batch, int tokens) const {
    double total = 0;
    for (int b = 0; b < batch; ++b) {
      std::vector<Vec> x(static_cast<size_t>(tokens));
      for (int t = 0; t < tokens; ++t) x[t] = row("model.embed_tokens.weight", ids[b * tokens + t], c_.hidden);
      for (int l = 0; l < c_.layers; ++l) x = layer(x, "model.layers." + std::to_string(l) + ".");
      const std::string head = c_.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
      for (int t = 0; t < tokens; ++t) {
        const Vec h = norm(x[t], "model.norm.weight");
        const Vec logits = apply(head, h, c_.vocab, c_.hidden);
        double max = logits[0], sum = 0;
        for (double z : logits) max = std::max(max, z);
        for (double z : logits) sum += std::exp(z - max);
        total += std::log(sum) + max - logits[targets[b * tokens + t]];
      }
    }
    return total / (batch * tokens);
  }

 private:
  Vec row(const std::string& name, int r, int64_t width) const {
    const Vec& m = w_.at(name);
    return Vec(m.begin() + r * width, m.begin() + (r + 1) * width);
  }
  /// W x for W [out, in] stored row-major.
  Vec apply(const std::string& name, const Vec& x, int64_t out, int64_t in) const {
    const Vec& m = w_.at(name);
    Vec y(static_cast<size_t>(out), 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += m[o * in + i] * x[i];
    return y;
  }
  Vec norm(const Vec& x, const std::string& weight) const {
    double ms = 0;
    for (double v : x) ms += v * v / static_cast<double>(x.size());
    const Vec& g = w_.at(weight);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + c_.rms_eps) * g[i];
    return y;
  }
  /// Rotate-half RoPE of one head's vector at position t.
  Vec rotate(const Vec& v, int t) const {
    const size_t half = v.size() / 2;
    const Vec f = rope_frequencies(static_cast<int64_t>(v.size()), c_.rope);
    Vec y(v.size());
    for (size_t i = 0; i < half; ++i) {
      const double cs = std::cos(t * f[i]), sn = std::sin(t * f[i]);
      y[i] = v[i] * cs - v[i + half] * sn;
      y[i + half] = v[i + half] * cs + v[i] * sn;
    }
    return y;
  }
  std::vector<Vec> layer(const std::vector<Vec>& x, const std::string& p) const {
    const int64_t hs = c_.head_size(), C = c_.hidden, T = static_cast<int64_t>(x.size());
    const int64_t group = c_.heads / c_.kv_heads;
    std::vector<Vec> q(T), k(T), v(T), h(T), out(T);
    for (int64_t t = 0; t < T; ++t) {
      const Vec n = norm(x[t], p + "input_layernorm.weight");
      q[t] = apply(p + "self_attn.q_proj.weight", n, c_.heads * hs, C);
      k[t] = apply(p + "self_attn.k_proj.weight", n, c_.kv_heads * hs, C);
      v[t] = apply(p + "self_attn.v_proj.weight", n, c_.kv_heads * hs, C);
    }
    auto head = [&](const Vec& all, int64_t hd) { return Vec(all.begin() + hd * hs, all.begin() + (hd + 1) * hs); };
    for (int64_t t = 0; t < T; ++t) {
      Vec attended(static_cast<size_t>(c_.heads * hs), 0.0);
      for (int64_t hd = 0; hd < c_.heads; ++hd) {
        const int64_t kv = hd / group;
        const Vec qt = rotate(head(q[t], hd), static_cast<int>(t));
        Vec scores;
        for (int64_t s = 0; s <= t; ++s) {
          const Vec ks = rotate(head(k[s], kv), static_cast<int>(s));
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d) dot += qt[d] * ks[d];
          scores.push_back(dot / std::sqrt(static_cast<double>(hs)));
        }
        double max = scores[0], sum = 0;
        for (double z : scores) max = std::max(max, z);
        for (double& z : scores) sum += (z = std::exp(z - max));
        for (int64_t s = 0; s <= t; ++s)
          for (int64_t d = 0; d < hs; ++d) attended[hd * hs + d] += scores[s] / sum * v[s][kv * hs + d];
      }
      const Vec o = apply(p + "self_attn.o_proj.weight", attended, C, c_.heads * hs);
      h[t] = x[t];
      for (int64_t i = 0; i < C; ++i) h[t][i] += o[i];
      const Vec n = norm(h[t], p + "post_attention_layernorm.weight");
      const Vec gate = apply(p + "mlp.gate_proj.weight", n, c_.intermediate, C);
      const Vec up = apply(p + "mlp.up_proj.weight", n, c_.intermediate, C);
      Vec act(gate.size());
      for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const Vec down = apply(p + "mlp.down_proj.weight", act, C, c_.intermediate);
      out[t] = h[t];
      for (int64_t i = 0; i < C; ++i) out[t][i] += down[i];
    }
    return out;
  }

  LlamaConfig c_;
  std::map<std::string, Vec> w_;
};

struct Batch {
  std::vector<int> ids, targets;
  Tensor id_tensor, target_tensor;
};

Batch random_batch(int batch, int tokens, int vocab, uint64_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  std::vector<double> ids, targets;
  for (int i = 0; i < batch * tokens; ++i) {
    b.ids.push_back(static_cast<int>(rng() % vocab));
    b.targets.push_back(static_cast<int>(rng() % vocab));
    ids.push_back(b.ids.back());
    targets.push_back(b.targets.back());
  }
  b.id_tensor = Tensor::from_vector(ids, {batch, tokens}, DType::I64);
  b.target_tensor = Tensor::from_vector(targets, {batch, tokens}, DType::I64);
  return b;
}

/// The norms start at 1; a random scale tests that they are applied.
void perturb_norms(Llama& model, uint64_t seed) {
  Generator gen(seed);
  for (const auto& [name, p] : model.named_parameters())
    if (name.find("norm") != std::string::npos) p.copy_(Tensor::rand(p.shape(), gen, DType::F64) + 0.5);
}

TEST(Llama, MatchesTheDefinitionWithGroupedQueriesAndScaledRope) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied head" : "untied head");
    const LlamaConfig config = tiny(tied);
    Llama model(config, 7);
    model.to(kCPU, DType::F64);
    perturb_norms(model, 8);
    EXPECT_EQ(model.state_dict().count("lm_head.weight"), tied ? 0u : 1u);
    EXPECT_EQ(model.state_dict().at("model.layers.1.self_attn.k_proj.weight").shape(), (Shape{2 * 6, 16}));
    const Batch b = random_batch(2, 7, config.vocab, 9);
    const double ours = model.loss(b.id_tensor, b.target_tensor).item();
    const double reference = Reference(config, model.state_dict()).loss(b.ids, b.targets, 2, 7);
    EXPECT_NEAR(ours, reference, 1e-12 * std::abs(reference));
    EXPECT_GT(reference, 0.5);  // not a degenerate comparison
  }
}

TEST(Llama, GradientsMatchFiniteDifferences) {
  const LlamaConfig config = tiny(false);
  Llama model(config, 11);
  model.to(kCPU, DType::F64);
  perturb_norms(model, 12);
  const Batch b = random_batch(2, 5, config.vocab, 13);
  model.loss(b.id_tensor, b.target_tensor).backward();
  std::mt19937 rng(14);
  int checked = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    double* values = p.data<double>();
    const std::vector<double> grad = p.grad().to_vector();
    for (int k = 0; k < 2; ++k) {
      const size_t i = rng() % static_cast<size_t>(p.numel());
      const double saved = values[i], eps = 1e-6;
      NoGradGuard no_grad;
      values[i] = saved + eps;
      const double up = model.loss(b.id_tensor, b.target_tensor).item();
      values[i] = saved - eps;
      const double down = model.loss(b.id_tensor, b.target_tensor).item();
      values[i] = saved;
      EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-7 + 1e-5 * std::abs(grad[i])) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * (2 * 9 + 3));  // every parameter of both layers, the embedding, norm and head
}

TEST(Llama, LoraOnHuggingFaceNamesStartsUnchangedAndTrainsAlone) {
  const LlamaConfig config = tiny(false);
  Llama model(config, 21);
  model.to(kCPU, DType::F64);
  const Batch b = random_batch(2, 5, config.vocab, 22);
  const double before = model.loss(b.id_tensor, b.target_tensor).item();
  model.add_lora({.rank = 2, .alpha = 4.0}, {"q_proj", "v_proj", "down_proj"}, 23);
  EXPECT_DOUBLE_EQ(model.loss(b.id_tensor, b.target_tensor).item(), before);  // B starts at zero
  const std::map<std::string, Tensor> lora = model.lora_state_dict();
  EXPECT_EQ(lora.size(), 2u * 3u * 2u);  // 2 layers x 3 targets x (A, B)
  EXPECT_EQ(lora.at("model.layers.1.self_attn.q_proj.lora_A.weight").shape(), (Shape{2, 16}));
  EXPECT_EQ(lora.at("model.layers.1.self_attn.v_proj.lora_B.weight").shape(), (Shape{2 * 6, 2}));
  EXPECT_EQ(lora.at("model.layers.0.mlp.down_proj.lora_A.weight").shape(), (Shape{2, 24}));
  EXPECT_EQ(model.trainable_parameters().size(), lora.size());
  EXPECT_TRUE(model.state_dict().count("model.layers.0.self_attn.q_proj.weight"));  // the base keeps its name
  // B away from zero, then finite differences on one element of every adapter.
  Generator gen(24);
  for (const auto& [name, p] : lora)
    if (name.find("lora_B") != std::string::npos) p.copy_(Tensor::randn(p.shape(), gen, DType::F64) * 0.1);
  model.loss(b.id_tensor, b.target_tensor).backward();
  for (const auto& [name, p] : model.named_parameters()) {
    if (!lora.count(name)) {
      EXPECT_FALSE(p.grad().defined()) << name;
      continue;
    }
    double* values = p.data<double>();
    const double grad = p.grad().to_vector()[1], saved = values[1], eps = 1e-6;
    NoGradGuard no_grad;
    values[1] = saved + eps;
    const double up = model.loss(b.id_tensor, b.target_tensor).item();
    values[1] = saved - eps;
    const double down = model.loss(b.id_tensor, b.target_tensor).item();
    values[1] = saved;
    EXPECT_NEAR(grad, (up - down) / (2 * eps), 1e-8 + 1e-5 * std::abs(grad)) << name;
  }
  Llama other(config, 1);
  EXPECT_TRUE(error_mentions([&] { other.add_lora({.rank = 2, .alpha = 4.0}, {"qkv"}, 1); },
                             "unknown target 'qkv' (choose from q_proj, k_proj, v_proj, o_proj, gate_proj"));
  EXPECT_TRUE(error_mentions([&] { other.add_lora({.rank = 2, .alpha = 4.0}, {"up_proj", "up_proj"}, 1); },
                             "given twice"));
  EXPECT_TRUE(error_mentions([&] { other.add_lora({.rank = 2, .alpha = 4.0}, {}, 1); }, "no targets"));
}

TEST(Llama, ShapeCountsEveryParameterFromTheConfigAlone) {
  for (bool tied : {false, true}) {
    const LlamaConfig c = tiny(tied);
    Llama model(c, 3);
    const CausalLMShape s = model.shape();
    EXPECT_EQ(s.parameters, model.parameter_count()) << "tied " << tied;
    EXPECT_EQ(c.parameter_count(), model.parameter_count());
    EXPECT_EQ(s.family, "llama");
    EXPECT_EQ(s.attention_width, 24);  // 4 heads of 6: not the width of 16
    EXPECT_EQ(s.kv_heads, 2);
    EXPECT_EQ(model.lora_target_names(), Llama::lora_targets());
  }
}

TEST(Llama, ConfigChecksNameTheField) {
  LlamaConfig c = tiny(false);
  c.kv_heads = 3;
  EXPECT_TRUE(error_mentions([&] { c.check(); }, "4 query heads do not split into groups of 3"));
  c = tiny(false);
  c.head_dim = 5;
  EXPECT_TRUE(error_mentions([&] { c.check(); }, "even head size"));
  c = tiny(false);
  c.head_dim = 0;
  c.heads = 3;
  c.kv_heads = 3;
  EXPECT_TRUE(error_mentions([&] { c.check(); }, "does not split into 3 heads"));
  Llama model(tiny(false), 1);
  EXPECT_TRUE(error_mentions([&] { model.loss(Tensor::zeros({1, 17}, DType::I64), Tensor::zeros({1, 17}, DType::I64)); },
                             "exceeds max_positions 16"));
}

}  // namespace
}  // namespace ft
