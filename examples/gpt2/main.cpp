// ft-gpt2: trains a language model, GPT-2 or Llama (--arch, or --init-from's config.json), on
// llm.c token shards, or on text files read as bytes or encoded by a Hugging Face tokenizer
// (--tokenizer), with validation, checkpoints (--resume continues a run exactly) and samples
// printed as text; with --lora-rank, LoRA fine-tuning of a base from --init-from (adapters saved
// as PEFT does); a Llama can be written back as a Hugging Face folder (--export-hf).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "examples/common/memory_check.h"
#include "examples/common/training_flags.h"
#include "examples/gpt2/memory_plan.h"
#include "examples/gpt2/model_family.h"
#include "examples/gpt2/parity_dump.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "lib/runtime.h"
#include "optim/lr_schedule.h"
#include "train/data/bpe_tokenizer.h"
#include "train/data/file_list.h"
#include "train/data/text_shards.h"
#include "train/data/token_shards.h"
#include "train/io/checkpoint.h"
#include "train/io/peft_adapter.h"
#include "train/loop/startup.h"
#include "train/loop/trainer.h"

namespace {

// "qkv,fc" -> {"qkv", "fc"} (empty items dropped).
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

/// Samples' text in and out: a tokenizer's, or bytes as tokens (a vocabulary of 256).
struct SampleText {
  const ft::BpeTokenizer* tokenizer = nullptr;
  std::vector<int32_t> encode(const std::string& prompt) const {
    if (tokenizer) {
      std::vector<int32_t> ids = tokenizer->encode(prompt);
      if (ids.empty()) ids.push_back(std::max(tokenizer->document_start_token(), 0));
      return ids;
    }
    std::vector<int32_t> ids;
    for (unsigned char c : prompt.empty() ? std::string("\n") : prompt) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const {
    if (tokenizer) return tokenizer->decode(ids);
    std::string out;
    for (int32_t id : ids) out += std::isprint(id) || id == '\n' ? static_cast<char>(id) : '?';
    return out;
  }
};

// Sampling: temperature and top-k over the last position's logits; the continuation's text.
std::string sample(ft::CausalLM& model, const SampleText& text, const std::string& prompt, int64_t length,
                   double temperature, int64_t top_k, uint64_t seed, ft::Device device) {
  ft::NoGradGuard no_grad;
  model.eval();
  std::vector<double> ids;
  for (int32_t id : text.encode(prompt)) ids.push_back(id);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> drawn;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t window = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.shape().max_seq);
    std::vector<double> context(ids.end() - window, ids.end());
    const ft::Tensor x = ft::Tensor::from_vector(context, {1, window}, ft::DType::I64, device);
    const ft::Tensor logits = model.logits(x);
    const std::vector<double> all = logits.to_vector();
    // The padding rows past the tokenizer's vocabulary are never drawn.
    const int64_t vocab = text.tokenizer ? std::min(logits.size(-1), text.tokenizer->vocab_size()) : logits.size(-1);
    std::vector<double> last(all.end() - logits.size(-1), all.end() - logits.size(-1) + vocab);
    std::vector<double> sorted = last;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double cutoff = top_k > 0 && top_k < vocab ? sorted[static_cast<size_t>(top_k - 1)] : -INFINITY;
    std::vector<double> weights(last.size());
    for (size_t j = 0; j < last.size(); ++j)
      weights[j] = last[j] < cutoff ? 0.0 : std::exp((last[j] - sorted[0]) / std::max(temperature, 1e-6));
    std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
    const int64_t next = pick(rng);
    ids.push_back(static_cast<double>(next));
    drawn.push_back(static_cast<int32_t>(next));
  }
  model.train();
  return text.decode(drawn);
}

void define_flags(ft::cli::Args& args) {
  ft::cli::add_training_flags(
      args, {.steps = "100", .steps_help = "optimizer steps to run in total (a resumed run continues to this)",
             .lr = "6e-4", .weight_decay = "0.1", .log_every = "10",
             .optimizer_help = "adamw (betas 0.9, 0.95) or sgd (with --momentum)",
             .weight_decay_help = "weight decay (AdamW: 2-D weights only)",
             .seed_help = "seed for initialization, shard shuffling and sampling"});
  args.flag("train", "", "glob of training files (required)");
  args.flag("val", "", "glob of validation files (default: none)");
  args.flag("format", "shards", "shards (llm.c token shards, GPT-2's uint16 or Llama 3's uint32) or text (text files:\n"
                               "bytes as tokens, or encoded by --tokenizer)");
  args.flag("tokenizer", "", "a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3): --format text files are\n"
                             "encoded by it (once, into shards under --token-cache), the vocabulary follows it, and\n"
                             "samples are its text");
  args.flag("token-cache", "/tmp/ft-gpt2-tokens", "with --tokenizer and --format text: where the encoded shards are\n"
                                                 "kept, in a folder per tokenizer and set of files");
  args.flag("arch", "", "the model family: gpt2 or llama (default: --init-from's config.json model_type, else gpt2)");
  args.flag("model", "", "the sizes (default: d12 for gpt2, 1b for llama). gpt2: tiny (L2 C64), d6 (L6 C384),\n"
                         "d12 (GPT-2 small, L12 C768), d24 (L24 C1024), d36 (L36 C1280) or d48 (GPT-2 XL, 1.5B:\n"
                         "L48 C1600, 25 heads); llama: tiny (L2 C64, 4 heads, 2 KV heads), 1b (Llama-3.2-1B's\n"
                         "shape: L16 C2048, 32 heads, 8 KV heads, MLP 8192, tied) or 8b (Llama-3.1-8B's: L32\n"
                         "C4096, 32 heads, 8 KV heads, MLP 14336, untied). A Llama from --init-from is sized by\n"
                         "its config.json");
  args.flag("vocab", "0", "vocabulary size of the model (0: --init-from's, or the tokenizer's rounded up to 128; else\n"
                          "for shards 50304 (GPT-2's 50257 padded) or 128256 (Llama 3's) by --arch; 256 for text)");
  args.flag("tokens", "0", "token ids in the data must be below this (0: the tokenizer's vocabulary; else for shards\n"
                           "50257 or 128256 by --arch; 256 for text): the padding rows of the embedding never see a token");
  args.flag("batch", "4", "sequences per micro-step (B)");
  args.flag("seq", "64", "tokens per sequence (T), at most the model's longest (GPT-2's block size)");
  args.flag("grad-accum", "1", "micro-steps accumulated per optimizer step");
  args.flag("warmup", "10", "linear warmup steps");
  args.flag("min-lr-frac", "0.1", "cosine decay floor as a fraction of the peak");
  args.flag("clip", "1.0", "gradient clipping by global L2 norm (0: off)");
  args.flag("shuffle", "1", "1: shuffle shard order each epoch; 0: in order");
  args.flag("val-every", "0", "steps between validations (0: never)");
  args.flag("val-batches", "8", "batches per validation");
  args.flag("sample-every", "0", "steps between samples (with --tokenizer, or a byte-level model; 0: never)");
  args.flag("sample-len", "128", "tokens per sample");
  args.flag("prompt", "", "text the samples start from");
  args.flag("temperature", "1.0", "sampling temperature (0: always the most likely token)");
  args.flag("top-k", "0", "sample among the k most likely tokens (0: all)");
  args.flag("init-from", "", "start from these weights: for gpt2 an ft-gpt2 checkpoint (a step_N folder or its\n"
                            "model.safetensors) or a Hugging Face GPT-2 model.safetensors (or its folder), the\n"
                            "--model preset matching its sizes; for llama a Hugging Face folder (config.json with\n"
                            "model.safetensors, or shards and their index), whose config sizes the model");
  args.flag("dry-run", "0", "1: print what each rank will hold (weights, gradients, optimizer state, activations)\n"
                          "against the device's free memory, refuse a run that does not fit, and train nothing");
  args.flag("recompute", "none", "activation recomputation: none keeps every layer's activations for backward; block\n"
                                 "keeps each layer's input alone and runs the layer again in backward (less memory,\n"
                                 "about a third more computation); selective keeps the linears' products too and\n"
                                 "recomputes the norms, activations and attention. The same gradients bit for bit");
  args.flag("export-hf", "", "at the end, write the trained model to this folder as a Hugging Face one (config.json,\n"
                            "model.safetensors) that LlamaForCausalLM or GPT2LMHeadModel.from_pretrained loads");
  args.flag("lora-rank", "0", "LoRA fine-tuning: adapters of this rank on --lora-targets, the base frozen (0: off,\n"
                            "every weight trains)");
  args.flag("lora-alpha", "16", "LoRA scale numerator: the update is alpha/r * B*A");
  args.flag("lora-dropout", "0", "dropout on the adapters' input (0 takes the fastest path)");
  args.flag("lora-targets", "", "comma-separated linears of each block to adapt (default: all of them): gpt2: qkv,\n"
                            "attn_proj, fc, mlp_proj; llama: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,\n"
                            "down_proj");
  args.flag("lora-rslora", "0", "1: scale by alpha/sqrt(r) (rank-stabilized LoRA) instead of alpha/r");
  args.flag("dump-dir", "", "write what tests/parity/gpt2_parity.py and lora_parity.py compare to this folder:\n"
                            "init.safetensors (the parameters this run starts from, after --init-from or\n"
                            "--resume), batches.safetensors (every step's inputs and targets) and\n"
                            "grads.safetensors (the gradients of this run's first step, before clipping, with its\n"
                            "loss and step number; after --resume, the first step after the checkpoint)");
}

/// The run's sizes, from the flags.
struct Settings {
  ft::TokenFormat format;
  int64_t vocab, token_limit, batch, seq, steps, accum;
  ft::gpt2::ModelChoice model;
  std::vector<std::string> lora_targets;               ///< --lora-targets, or all of the family's
  std::shared_ptr<const ft::BpeTokenizer> tokenizer;  ///< --tokenizer, or none
};

/// A --resume checkpoint of another model is named as such before anything is loaded.
void check_resumed_model(const ft::cli::Args& args, const Settings& s) {
  const std::map<std::string, std::string> state = ft::checkpoint_run_state(args.str("resume"));
  const auto value = [&](const char* key) { return state.count(key) ? state.at(key) : std::string(); };
  // Checkpoints from before --arch hold GPT-2 runs and name no arch.
  const std::string arch = value("arch").empty() ? "gpt2" : value("arch");
  const std::string model = value("model"), vocab = value("vocab");
  FT_CHECK(arch == s.model.arch && (model.empty() || model == s.model.preset) &&
               (vocab.empty() || vocab == std::to_string(s.vocab)),
           "ft-gpt2: --resume '", args.str("resume"), "' holds an --arch ", arch, " --model ", model, " --vocab ", vocab,
           " run; this one is --arch ", s.model.arch, " --model ", s.model.preset, " --vocab ", s.vocab,
           ": give the checkpoint's");
}

/// --lora-targets: every linear of the family by default; else known names, each once.
std::vector<std::string> lora_targets(const ft::cli::Args& args, const std::string& arch) {
  const std::vector<std::string> known = ft::gpt2::lora_names(arch);
  const std::vector<std::string> targets = args.str("lora-targets").empty() ? known : split_list(args.str("lora-targets"));
  ft::check_lora_targets(targets, known, "ft-gpt2: --lora-targets");
  return targets;
}

/// The family, the model's sizes and vocabulary, and the ids the data may hold.
void choose_sizes(const ft::cli::Args& args, Settings& s) {
  const std::string arch = ft::gpt2::arch_of(args.str("arch"), args.str("init-from"));
  const bool llama = arch == "llama";
  const int64_t tokenizer_vocab = s.tokenizer ? s.tokenizer->vocab_size() : 0;
  const int64_t shard_tokens = llama ? 128256 : 50257, shard_vocab = llama ? 128256 : 50304;
  const bool from_folder = ft::gpt2::sized_by_folder(arch, args.str("init-from"));
  int64_t vocab = args.integer("vocab", 0);
  if (vocab == 0 && !from_folder)
    vocab = s.tokenizer ? (tokenizer_vocab + 127) / 128 * 128 : s.format == ft::TokenFormat::Text ? 256 : shard_vocab;
  s.model = ft::gpt2::choose_model(arch, args.str("model"), args.str("init-from"), vocab);
  if (from_folder) args.note_ignored({"model"}, "the model's sizes come from --init-from's config.json");
  s.vocab = s.model.shape().vocab;
  s.token_limit = args.integer("tokens", 0);
  if (s.token_limit == 0)
    s.token_limit = s.tokenizer ? tokenizer_vocab
                                : s.format == ft::TokenFormat::Text ? std::min<int64_t>(s.vocab, 256)
                                                                     : std::min<int64_t>(s.vocab, shard_tokens);
  FT_CHECK(!s.tokenizer || s.vocab >= tokenizer_vocab, "ft-gpt2: the model's vocabulary ", s.vocab,
           " is smaller than the tokenizer's ", tokenizer_vocab, " tokens");
  FT_CHECK(s.token_limit <= s.vocab, "ft-gpt2: --tokens ", s.token_limit, " exceeds the vocabulary (", s.vocab, ")");
  FT_CHECK(args.str("export-hf").empty() || args.integer("lora-rank", 0) == 0, "ft-gpt2: --export-hf writes a whole ",
           "model; a LoRA run's adapters are saved in PEFT's layout with each checkpoint (--ckpt-dir)");
}

/// Every numeric flag is checked here, at the edge, even those only read later (sampling, LoRA).
Settings check_flags(const ft::cli::Args& args) {
  ft::cli::check_training_flags(args, "ft-gpt2");
  for (const char* name : {"top-k", "sample-len", "sample-every", "val-every", "val-batches", "warmup", "lora-rank"})
    (void)args.integer(name, 0);
  for (const char* name : {"temperature", "clip", "min-lr-frac", "lora-alpha", "lora-dropout"}) (void)args.number(name, 0);
  for (const char* name : {"batch", "seq", "steps", "grad-accum"}) (void)args.integer(name, 1);
  FT_CHECK(args.number("lora-dropout") < 1, "ft-gpt2: --lora-dropout must be below 1, got ", args.number("lora-dropout"));
  FT_CHECK(args.number("lora-alpha") > 0, "ft-gpt2: --lora-alpha must be positive, got ", args.number("lora-alpha"));
  const std::vector<std::string> targets = lora_targets(args, ft::gpt2::arch_of(args.str("arch"), args.str("init-from")));
  FT_CHECK(args.number("min-lr-frac") <= 1, "ft-gpt2: --min-lr-frac is the floor as a fraction of the peak, at most 1, got ",
           args.number("min-lr-frac"));
  FT_CHECK(!args.str("train").empty() || args.boolean("dry-run"), "ft-gpt2: --train is required (see --help)");
  FT_CHECK(args.str("dump-dir").empty() || args.integer("zero", 0) < 2, "ft-gpt2: --dump-dir writes every parameter's ",
           "gradient, which --zero 2 and 3 keep only as this rank's shard: use --zero 0 or 1");
  FT_CHECK(args.integer("zero", 0) < 3 || args.integer("sample-every", 0) == 0, "ft-gpt2: --sample-every samples on ",
           "rank 0 alone, and --zero 3 gathers every layer on every rank: sample from the model --export-hf writes");
  for (const char* name : {"shuffle", "lora-rslora", "dry-run"}) (void)args.boolean(name);
  (void)ft::parse_recompute(args.str("recompute"), "ft-gpt2");
  if (args.integer("lora-rank", 0) == 0)
    for (const char* name : {"lora-alpha", "lora-dropout", "lora-targets", "lora-rslora"})
      FT_CHECK(!args.given(name), "ft-gpt2: --", name, " configures LoRA adapters, which --lora-rank 0 (the default) turns off: ",
               "set --lora-rank too");
  FT_CHECK(args.str("init-from").empty() || args.str("resume").empty(), "ft-gpt2: --init-from and --resume both given: ",
           "--resume continues a run from its own weights; --init-from starts a new one (give one of them)");
  const std::string format_name = args.str("format");
  FT_CHECK(format_name == "shards" || format_name == "text", "ft-gpt2: --format must be shards or text");
  Settings s{.format = format_name == "text" ? ft::TokenFormat::Text : ft::TokenFormat::Shards};
  if (!args.str("tokenizer").empty())
    s.tokenizer = std::make_shared<const ft::BpeTokenizer>(ft::BpeTokenizer::from_file(args.str("tokenizer")));
  else
    args.note_ignored({"token-cache"}, "only --tokenizer's text is encoded into it");
  choose_sizes(args, s);
  s.lora_targets = targets;
  s.batch = args.integer("batch", 1);
  s.seq = args.integer("seq", 1);
  s.steps = args.integer("steps", 1);
  s.accum = args.integer("grad-accum", 1);
  const int64_t max_seq = s.model.shape().max_seq;
  FT_CHECK(s.seq <= max_seq, "ft-gpt2: --seq ", s.seq, " exceeds the model's longest sequence ", max_seq);
  if (!args.str("resume").empty()) check_resumed_model(args, s);
  if (args.str("val").empty()) args.note_ignored({"val-every", "val-batches"}, "without --val nothing is validated");
  if (s.vocab != 256 && !s.tokenizer)
    args.note_ignored({"sample-every", "sample-len", "prompt", "temperature", "top-k"},
                      "samples are text with --tokenizer or a byte-level model (vocabulary 256) only");
  return s;
}

/// A rank's memory plan (examples/gpt2/memory_plan.h) for the run the flags ask for.
ft::cli::MemoryEstimate memory_estimate(const Settings& s, const ft::cli::Args& args, ft::DType dtype, int world) {
  return ft::gpt2::memory_plan(s.model, {.tokens = s.batch * s.seq,
                                         .dtype = dtype,
                                         .optimizer = args.str("optimizer"),
                                         .momentum = args.number("momentum", 0),
                                         .lora_rank = args.integer("lora-rank", 0),
                                         .lora_targets = s.lora_targets,
                                         .world = world,
                                         .zero = static_cast<int>(args.integer("zero", 0)),
                                         .accum = s.accum,
                                         .bucket_mb = args.number("bucket-mb", 0),
                                         .recompute = ft::parse_recompute(args.str("recompute"), "ft-gpt2")});
}

/// The training loader and, with --val, the validation one (in order), each reading this rank's part.
struct Data {
  std::unique_ptr<ft::TokenLoader> train, val;
};
Data open_data(const ft::cli::Args& args, const Settings& s, const ft::BatchShard& shard) {
  // Text through a tokenizer is read as the shards it encodes to (made once, then reused).
  const bool encode = s.tokenizer && s.format == ft::TokenFormat::Text;
  auto files = [&](const char* flag, const char* name) {
    if (!encode) return args.str(flag);
    return ft::cached_text_shards(*s.tokenizer, args.str("tokenizer"),
                                  ft::expand_file_list(args.str(flag), std::string("ft-gpt2: --") + flag),
                                  args.str("token-cache"), name);
  };
  const ft::TokenLoader::Options options{.batch_size = s.batch, .seq_len = s.seq, .vocab_size = s.token_limit,
                                         .seed = static_cast<uint64_t>(args.integer("seed", 0)),
                                         .shuffle = args.boolean("shuffle"),
                                         .format = encode ? ft::TokenFormat::Shards : s.format, .shard = shard};
  Data d{std::make_unique<ft::TokenLoader>(files("train", "train"), options), nullptr};
  if (!args.str("val").empty()) {
    ft::TokenLoader::Options in_order = options;
    in_order.shuffle = false;
    d.val = std::make_unique<ft::TokenLoader>(files("val", "val"), in_order);
  }
  return d;
}

/// --init-from's weights, then the LoRA adapters --lora-rank asks for; returns their PEFT config
/// (r = 0: none).
ft::PeftLoraConfig prepare_model(ft::CausalLM& model, const Settings& s, const ft::cli::Args& args, ft::Device device,
                                 ft::DType dtype) {
  if (!args.str("init-from").empty())
    std::printf("initialized from %s (%s)\n", args.str("init-from").c_str(),
                ft::gpt2::init_from(model, args.str("init-from")).c_str());
  model.to(device, dtype);
  const int64_t rank = args.integer("lora-rank", 0);
  if (rank == 0) return {};
  const int64_t width = model.shape().width;
  FT_CHECK(rank <= width, "ft-gpt2: --lora-rank ", rank, " exceeds the model's width ", width,
           " (a rank above the smaller side of a linear adds nothing)");
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
  const ft::PeftLoraConfig adapter{.r = rank, .alpha = args.number("lora-alpha", 0),
                                   .dropout = args.number("lora-dropout", 0),
                                   .targets = s.lora_targets,
                                   .rslora = args.boolean("lora-rslora"), .base_model = args.str("init-from")};
  model.add_lora(ft::LoRAConfig{.rank = adapter.r, .alpha = adapter.alpha, .dropout = adapter.dropout,
                                .rslora = adapter.rslora, .seed = seed},
                 adapter.targets, seed + 1);
  return adapter;
}

void print_banner(const ft::CausalLM& model, const Settings& s, ft::Device device, ft::DType dtype, int world_size) {
  const ft::CausalLMShape c = model.shape();
  const std::string kv = c.kv_heads != c.heads ? " NKV=" + std::to_string(c.kv_heads) : "";
  std::printf("ft-gpt2: %s, %lld parameters, %lld trainable (L=%lld C=%lld NH=%lld%s V=%lld) on %s (%s), kernels %s, "
              "B=%lld per process (global %lld) T=%lld, grad accum %lld, %lld steps\n",
              c.family.c_str(), static_cast<long long>(model.parameter_count()),
              static_cast<long long>(model.trainable_parameter_count()), static_cast<long long>(c.layers),
              static_cast<long long>(c.width), static_cast<long long>(c.heads), kv.c_str(),
              static_cast<long long>(s.vocab), device.str().c_str(), ft::dtype_name(dtype),
              ft::kernel_mode_name(ft::kernel_mode()), static_cast<long long>(s.batch),
              static_cast<long long>(s.batch * world_size), static_cast<long long>(s.seq),
              static_cast<long long>(s.accum), static_cast<long long>(s.steps));
}

/// The loop's options: warmup and cosine decay, tokens as the unit, the model's FLOPs per token.
ft::Trainer::Options trainer_options(const ft::cli::Args& args, const Settings& s, const ft::CausalLM& model,
                                     ft::DataParallel* data_parallel) {
  const double params = static_cast<double>(model.parameter_count());
  const double trainable = static_cast<double>(model.trainable_parameter_count());
  const double lr = args.number("lr", 0);
  return {.grad_accum = s.accum,
          .schedule = {.kind = ft::LRSchedule::Kind::WarmupCosine, .max_lr = lr,
                       .warmup_steps = args.integer("warmup", 0), .total_steps = s.steps,
                       .min_lr = lr * args.number("min-lr-frac", 0)},
          .log_every = args.integer("log-every", 0),
          .metrics_path = args.str("metrics"),
          .unit = "tok",
          .items_per_batch = s.batch * s.seq,
          // Per parameter per token: 2 FLOPs forward, 2 for the input gradient, 2 for its own gradient
          // when it trains (frozen ones have none); and the attention's 6·L·(NH·HS)·T.
          .flops_per_item = 4.0 * params + 2.0 * trainable +
                            6.0 * static_cast<double>(model.shape().layers * model.shape().attention_width * s.seq),
          .graph = ft::cli::graph_flag(args),
          .max_skipped_in_a_row = args.integer("max-skipped", 0),
          .data_parallel = data_parallel};
}

/// Validation every --val-every steps over --val-batches batches; sampling every --sample-every
/// steps, with a tokenizer or for byte-level models (rank 0 only).
void add_validation_and_sampling(ft::Trainer::Options& options, const ft::cli::Args& args, ft::CausalLM& model,
                                 ft::TokenLoader* val, ft::Device device, const ft::cli::DataParallelRun& dp,
                                 const ft::BpeTokenizer* tokenizer) {
  if (val && args.integer("val-every", 0) > 0) {
    options.eval_every = args.integer("val-every", 0);
    options.eval = [&args, &model, val, device, data_parallel = dp.get()](ft::Module&) {
      val->reset();
      double sum = 0;
      const int64_t batches = std::max<int64_t>(1, args.integer("val-batches", 1));
      for (int64_t i = 0; i < batches; ++i) {
        const ft::TokenBatch b = val->next_batch();
        sum += model.loss(b.inputs.to(device), b.targets.to(device)).item();
      }
      // Each rank's batches are its part of the global ones: the mean over the ranks is the loss
      // of world × --val-batches batches.
      const double mean = sum / static_cast<double>(batches);
      return std::map<std::string, double>{{"val loss", data_parallel ? data_parallel->mean_over_ranks(mean) : mean}};
    };
  }
  const int64_t every = args.integer("sample-every", 0);
  if (every == 0 || (model.shape().vocab != 256 && !tokenizer) || !dp.primary()) return;
  options.periodic.push_back({.every = every, .run = [&args, &model, device, tokenizer](int64_t step) {
                                const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));
                                std::printf("sample at step %lld:\n%s\n---\n", static_cast<long long>(step),
                                            sample(model, SampleText{tokenizer}, args.str("prompt"),
                                                   args.integer("sample-len", 0), args.number("temperature", 0),
                                                   args.integer("top-k", 0), seed + static_cast<uint64_t>(step), device)
                                                .c_str());
                              }});
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-gpt2",
                     "Trains a language model, GPT-2 or Llama (--arch), on llm.c token shards (--format shards), or\n"
                     "on text files (--format text) read as bytes (vocabulary 256) or encoded by a Hugging Face\n"
                     "tokenizer (--tokenizer). Prints a line every --log-every steps with loss, lr, grad norm, ms,\n"
                     "tok/s and MFU; validates, checkpoints, samples text and fine-tunes with LoRA on request.");
  define_flags(args);
  if (!args.parse(argc, argv)) return 0;
  const Settings s = check_flags(args);
  const ft::Device device = ft::cli::apply_device_flags(args, "ft-gpt2");
  const ft::DType dtype = device.is_cuda() ? ft::DType::BF16 : ft::DType::F32;
  const ft::LaunchEnv env = ft::launch_env();
  const ft::cli::MemoryEstimate memory = memory_estimate(s, args, dtype, env.world_size);
  const std::string shrink =
      "a smaller --model, or fewer tokens a step (--batch, --seq, with --grad-accum to keep the batch)" +
      std::string(args.str("recompute") == "none" ? ", or activations recomputed (--recompute block)" : "") +
      std::string(env.world_size > 1 && args.integer("zero", 0) < 3
                      ? ", or the optimizer state, gradients and weights split over the ranks (--zero 3)"
                      : "");
  if (args.boolean("dry-run")) {
    std::printf("ft-gpt2: memory a rank: %s\n", ft::cli::memory_plan_line(memory, device).c_str());
    ft::cli::check_memory(memory, device, "ft-gpt2", shrink);
    return 0;
  }
  // Joined before the data (each rank reads its part of every global batch) and the optimizer
  // (its buffers are laid out for the run's world size).
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-gpt2", env, device, /*max_zero=*/3);
  const Data data = open_data(args, s, dp.shard());
  ft::mark_startup("data");
  ft::cli::check_memory(memory, device, "ft-gpt2", shrink);

  const std::unique_ptr<ft::CausalLM> built = ft::gpt2::make_model(s.model, static_cast<uint64_t>(args.integer("seed", 0)));
  ft::CausalLM& model = *built;
  model.set_recompute(ft::parse_recompute(args.str("recompute"), "ft-gpt2"));
  const ft::PeftLoraConfig adapter = prepare_model(model, s, args, device, dtype);
  if (dp.partition.shard_params) {  // ZeRO-3: the optimizer keeps this rank's chunk of each layer
    dp.partition.units = model.layer_parameters();
    ft::cli::broadcast_model(dp, model);
  }
  ft::mark_startup("model");
  // Clipping and the non-finite check run inside the optimizer step, on the device.
  const std::unique_ptr<ft::Optimizer> optimizer = ft::cli::make_optimizer(
      args, "ft-gpt2", model.parameters(), dp.partition,
      {.policy = {.max_grad_norm = std::max(0.0, args.number("clip", 0))}, .beta2 = 0.95});
  const ft::cli::Resumed resumed = [&] {
    // ZeRO-3: the checkpoint's weights go into the whole model, then into this rank's shards.
    std::optional<ft::WholeParameters> whole;
    if (!args.str("resume").empty()) whole.emplace(optimizer->store(), /*gather=*/false);
    return ft::cli::resume_from_flag(args, model, *optimizer, {"epoch", "shard", "offset"});
  }();
  const int64_t global_batch = s.batch * dp.env.world_size * s.accum;
  ft::cli::check_resumed_batch(args, resumed, global_batch,
                               "--batch " + std::to_string(s.batch) + " x " + std::to_string(dp.env.world_size) +
                                   " processes x --grad-accum " + std::to_string(s.accum) + ", sequences",
                               "ft-gpt2");
  ft::cli::start_data_parallel(dp, args, "ft-gpt2", model, *optimizer);
  if (dp.get()) model.set_layer_gather(dp.get()->layer_gather());
  ft::mark_startup("optimizer");
  if (dp.primary()) {
    print_banner(model, s, device, dtype, dp.env.world_size);
    std::printf("ft-gpt2: memory a rank: %s\n", ft::cli::memory_plan_line(memory, device).c_str());
  }

  ft::Trainer::Options options = trainer_options(args, s, model, dp.get());
  add_validation_and_sampling(options, args, model, data.val.get(), device, dp, s.tokenizer.get());
  ft::cli::wire_checkpoints(
      args, options, model, *optimizer,
      [&](ft::DataPosition& run_state) {
        run_state["arch"] = s.model.arch;
        run_state["model"] = s.model.preset;
        run_state["vocab"] = std::to_string(s.vocab);
        run_state["batch size"] = std::to_string(global_batch);
      },
      [&](const std::string& folder) {
        // The adapters on their own too, as PEFT saves them (PeftModel.from_pretrained reads the folder).
        if (adapter.r > 0)
          ft::save_peft_adapter(folder, model.lora_state_dict(), adapter, ft::gpt2::peft_layout(model));
      });
  std::unique_ptr<ft::gpt2::ParityDump> dump;
  if (!args.str("dump-dir").empty()) dump = std::make_unique<ft::gpt2::ParityDump>(args.str("dump-dir"), model, options);

  ft::TokenBatchSource source(*data.train);
  ft::Trainer trainer(model, *optimizer, source,
                      [&](ft::Module&, const ft::Batch& b) { return model.loss(b.at("inputs"), b.at("targets")); },
                      options);
  if (!args.str("resume").empty()) {
    ft::cli::check_steps_left(resumed, s.steps, "ft-gpt2");
    trainer.resume(resumed.step, resumed.position);
  }
  const ft::FitSummary summary = trainer.fit(s.steps);
  if (dump) dump->finish();
  if (!args.str("export-hf").empty()) {
    const ft::WholeParameters whole(optimizer->store());  // every rank: ZeRO-3 gathers the layers
    if (dp.primary()) {
      ft::gpt2::export_hf(model, args.str("export-hf"), dtype);
      std::printf("ft-gpt2: wrote the model to %s (a Hugging Face %s folder)\n", args.str("export-hf").c_str(),
                  s.model.arch == "llama" ? "LlamaForCausalLM" : "GPT2LMHeadModel");
    }
  }
  // final_loss: the mean loss of the last logging window (one step's loss alone is too noisy to
  // judge a run by); wall_ms the wall clock per step, step_ms the steps alone (GPU events on CUDA);
  // tok_per_s and mfu per GPU, from wall_ms; peak_gb this rank's device memory high-water mark.
  ft::cli::print_communication_timing(dp, "ft-gpt2");
  if (dp.primary())
    std::printf("RESULT steps=%lld final_loss=%.4f uniform_loss=%.4f wall_ms=%.3f step_ms=%.3f tok_per_s=%.0f mfu=%.4f "
                "peak_gb=%.2f\n",
                static_cast<long long>(trainer.step()), summary.final_loss, std::log(static_cast<double>(s.vocab)),
                summary.wall_ms, summary.step_ms, summary.items_per_s / dp.env.world_size, summary.mfu.value_or(0.0),
                device.is_cuda() ? static_cast<double>(ft::peak_memory()) / 1e9 : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
