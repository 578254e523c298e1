#include "layers/lora.h"

#include <algorithm>
#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/lora_linear/lora_linear.h"
#include "lib/ops/random/random.h"

namespace ft {

double LoRAConfig::scale() const {
  const double r = static_cast<double>(rank);
  return rslora ? alpha / std::sqrt(r) : alpha / r;
}

void LoRAConfig::check() const {
  FT_CHECK(rank >= 1, "LoRA: the rank must be at least 1, got ", rank);
  FT_CHECK(std::isfinite(alpha), "LoRA: alpha must be finite, got ", alpha);
  FT_CHECK(dropout >= 0.0 && dropout < 1.0, "LoRA: dropout must be in [0, 1), got ", dropout);
}

LoRALinear::LoRALinear(const std::shared_ptr<Linear>& base, const LoRAConfig& config, Generator& gen)
    : config_(config), activation_(base->activation()) {
  config.check();
  const Tensor& w = base->weight();
  const int64_t out = w.size(0), in = w.size(1);
  FT_CHECK(config.rank <= std::min(in, out), "LoRA: the rank ", config.rank, " exceeds min(IN, OUT) = ",
           std::min(in, out), " of a ", out, " x ", in, " linear");
  weight_ = register_parameter("weight", w, /*trainable=*/false);
  if (base->bias().defined()) bias_ = register_parameter("bias", base->bias(), /*trainable=*/false);
  // PEFT's init: A Kaiming-uniform with a = √5, i.e. uniform in ±1/√IN; B zero.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  const Tensor a = affine(Tensor::rand({config.rank, in}, gen), 2.0 * bound, -bound);
  lora_a_ = register_parameter("lora_A.weight", a.to(w.device()).to(w.dtype()));
  lora_b_ = register_parameter("lora_B.weight", Tensor::zeros({out, config.rank}, w.dtype(), w.device()));
}

Tensor LoRALinear::forward(const Tensor& x) {
  if (merged()) return linear(x, weight_, bias_, activation_);
  LoRAOptions options;
  options.scale = config_.scale();
  options.activation = activation_;
  if (is_training() && config_.dropout > 0.0) {
    options.dropout = config_.dropout;
    options.seed = config_.seed;
    options.offset = PhiloxCounter::on(x.device()).take(static_cast<uint64_t>(x.numel()));
  }
  return lora_linear(x, weight_, bias_, lora_a_, lora_b_, options);
}

void LoRALinear::merge() {
  FT_CHECK(!merged(), "LoRALinear::merge: the adapter is merged already");
  unmerged_weight_ = Tensor::empty(weight_.shape(), weight_.dtype(), weight_.device());
  unmerged_weight_.copy_(weight_);
  lora_merge(weight_, lora_a_, lora_b_, config_.scale(), weight_);
}

void LoRALinear::unmerge() {
  FT_CHECK(merged(), "LoRALinear::unmerge: the adapter is not merged");
  weight_.detach().copy_(unmerged_weight_);
  unmerged_weight_ = Tensor();
}

void check_lora_targets(const std::vector<std::string>& targets, const std::vector<std::string>& known,
                        const std::string& who) {
  std::string names;
  for (const std::string& name : known) names += (names.empty() ? "" : ", ") + name;
  FT_CHECK(!targets.empty(), who, ": no targets (choose from ", names, ")");
  for (size_t i = 0; i < targets.size(); ++i) {
    FT_CHECK(std::find(known.begin(), known.end(), targets[i]) != known.end(), who, ": unknown target '", targets[i],
             "' (choose from ", names, ")");
    FT_CHECK(std::count(targets.begin(), targets.end(), targets[i]) == 1, who, ": target '", targets[i],
             "' given twice");
  }
}

std::map<std::string, Tensor> lora_parameters(const Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : model.named_parameters())
    if (name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos)
      out.emplace(name, t.detach());
  return out;
}

}  // namespace ft
