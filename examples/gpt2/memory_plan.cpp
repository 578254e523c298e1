#include "examples/gpt2/memory_plan.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ft::gpt2 {

namespace {

/// Each adaptable linear's (in, out), by the family's target names.
std::map<std::string, std::pair<int64_t, int64_t>> linear_sizes(const ModelChoice& m) {
  if (m.arch == "llama") {
    const LlamaConfig& c = m.llama;
    const int64_t q = c.heads * c.head_size(), kv = c.kv_heads * c.head_size();
    return {{"q_proj", {c.hidden, q}},           {"k_proj", {c.hidden, kv}},
            {"v_proj", {c.hidden, kv}},          {"o_proj", {q, c.hidden}},
            {"gate_proj", {c.hidden, c.intermediate}}, {"up_proj", {c.hidden, c.intermediate}},
            {"down_proj", {c.intermediate, c.hidden}}};
  }
  const int64_t c = m.gpt.channels;
  return {{"qkv", {c, 3 * c}}, {"attn_proj", {c, c}}, {"fc", {c, 4 * c}}, {"mlp_proj", {4 * c, c}}};
}

/// Parameters outside the layers: embeddings, final norm, head (ZeRO-3's root, kept whole).
double root_parameters(const ModelChoice& m) {
  if (m.arch == "llama") {
    const LlamaConfig& c = m.llama;
    return static_cast<double>(c.vocab * c.hidden * (c.tie_embeddings ? 1 : 2) + c.hidden);
  }
  const GPTConfig& c = m.gpt;
  return static_cast<double>((c.vocab + c.block_size + 2) * c.channels);
}

}  // namespace

int64_t lora_parameter_count(const ModelChoice& model, const std::vector<std::string>& targets, int64_t rank) {
  const auto sizes = linear_sizes(model);
  int64_t per_layer = 0;
  for (const std::string& t : targets) {
    const auto it = sizes.find(t);
    FT_CHECK(it != sizes.end(), "ft-gpt2: no linear '", t, "' in a ", model.arch, " layer");
    per_layer += rank * (it->second.first + it->second.second);
  }
  return per_layer * model.shape().layers;
}

cli::MemoryEstimate memory_plan(const ModelChoice& model, const RunSize& run) {
  const CausalLMShape shape = model.shape();
  const double base = static_cast<double>(shape.parameters);
  const double adapters =
      run.lora_rank > 0 ? static_cast<double>(lora_parameter_count(model, run.lora_targets, run.lora_rank)) : 0;
  const double trained = run.lora_rank > 0 ? adapters : base;
  const double value = run.dtype == DType::BF16 ? 2 : 4;
  // Beside each trained parameter: its f32 gradient; its f32 master (bf16 runs) and the moments.
  const double state = cli::training_bytes_per_parameter(run.dtype, run.optimizer, run.momentum) - value - 4;
  // ZeRO-2 keeps this rank's shard of the f32 gradients and two buckets' staging (a bucket is
  // --bucket-mb, or 1/64 of them when larger: DataPartition::max_buckets); with --grad-accum the
  // parameters' own gradients (their dtype) stay between micro-batches.
  const double bucket = std::max(run.bucket_mb * (1 << 20), trained * 4 / 64);
  const double gradients = run.zero >= 2 ? trained * 4 / run.world + 2 * bucket + (run.accum > 1 ? trained * value : 0)
                                         : trained * 4;
  // ZeRO-3 keeps 1/N of the layers' weights, the root whole, and two layers gathered at a time.
  double weights = (base + adapters) * value;
  if (run.zero == 3 && run.lora_rank == 0) {
    const double root = root_parameters(model), layer = (base - root) / static_cast<double>(shape.layers);
    weights = value * (root + (base - root) / run.world + 2 * layer);
  }
  cli::MemoryEstimate e;
  e.certain = {{"weights", weights},
               {"gradients", gradients},
               {"optimizer state", trained * state / (run.zero >= 1 ? run.world : 1)}};
  // Measured on a gpt2-124M step: about 12 values per token, channel and layer, and the logits.
  // Block recomputation keeps one per layer (its input) and the 12 of the one layer run again at
  // a time; selective keeps the linears' products too, about half of the 12 (an estimate).
  const double C = static_cast<double>(shape.width), L = static_cast<double>(shape.layers);
  const double kept = run.recompute == Recompute::Block ? 1 : run.recompute == Recompute::Selective ? 6 : 12;
  const double per_token = value * C * (kept * L + (run.recompute == Recompute::None ? 0 : 12));
  e.activations = static_cast<double>(run.tokens) * (per_token + value * static_cast<double>(shape.vocab));
  return e;
}

}  // namespace ft::gpt2
