// ft-gpt2: trains a GPT-2 on llm.c token shards or on a text file read as bytes, with
// validation, checkpoints (--resume continues a run exactly) and sampling for byte-level models;
// with --lora-rank, LoRA fine-tuning of a base from --init-from (adapters saved as PEFT does).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/common/checkpoint_flags.h"
#include "examples/common/cli.h"
#include "examples/common/data_parallel_flags.h"
#include "lib/autograd.h"
#include "lib/kernel_mode.h"
#include "models/gpt2/gpt.h"
#include "models/gpt2/gpt2_init.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "train/data/token_shards.h"
#include "train/io/peft_adapter.h"
#include "train/io/safetensors.h"
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

ft::GPTConfig preset(const std::string& name, int64_t vocab) {
  if (name == "tiny") return {.vocab = vocab, .block_size = 256, .layers = 2, .heads = 4, .channels = 64};
  if (name == "d6") return {.vocab = vocab, .block_size = 1024, .layers = 6, .heads = 6, .channels = 384};
  if (name == "d12") return {.vocab = vocab, .block_size = 1024, .layers = 12, .heads = 12, .channels = 768};
  FT_FAIL("ft-gpt2: unknown --model '", name, "': expected tiny, d6 or d12");
}

// Byte-level sampling: temperature and top-k over the last position's logits.
std::string sample(ft::GPT& model, const std::string& prompt, int64_t length, double temperature, int64_t top_k,
                   uint64_t seed, ft::Device device) {
  ft::NoGradGuard no_grad;
  model.eval();
  std::vector<double> ids;
  for (unsigned char c : prompt.empty() ? std::string("\n") : prompt) ids.push_back(c);
  std::mt19937_64 rng(seed);
  std::string out;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t window = std::min<int64_t>(static_cast<int64_t>(ids.size()), model.config().block_size);
    std::vector<double> context(ids.end() - window, ids.end());
    const ft::Tensor x = ft::Tensor::from_vector(context, {1, window}, ft::DType::I64, device);
    const ft::Tensor logits = model.logits(x);
    const std::vector<double> all = logits.to_vector();
    const int64_t vocab = logits.size(-1);
    std::vector<double> last(all.end() - vocab, all.end());
    std::vector<double> sorted = last;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double cutoff = top_k > 0 && top_k < vocab ? sorted[static_cast<size_t>(top_k - 1)] : -INFINITY;
    std::vector<double> weights(last.size());
    for (size_t j = 0; j < last.size(); ++j)
      weights[j] = last[j] < cutoff ? 0.0 : std::exp((last[j] - sorted[0]) / std::max(temperature, 1e-6));
    std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
    const int64_t next = pick(rng);
    ids.push_back(static_cast<double>(next));
    out += next < 256 && (std::isprint(static_cast<int>(next)) || next == '\n') ? static_cast<char>(next) : '?';
  }
  model.train();
  return out;
}

int run(int argc, char** argv) {
  ft::cli::Args args("ft-gpt2",
                     "Trains a GPT-2 on llm.c token shards (--format shards) or on text files read as bytes\n"
                     "(--format text, vocabulary 256). Prints a line every --log-every steps with loss, lr, grad\n"
                     "norm, ms, tok/s and MFU; validates, checkpoints and samples on request.");
  args.flag("train", "", "glob of training files (required)");
  args.flag("val", "", "glob of validation files (default: none)");
  args.flag("format", "shards", "shards (llm.c uint16 token shards) or text (bytes)");
  args.flag("model", "d12", "tiny (L2 C64), d6 (L6 C384) or d12 (GPT-2 small, L12 C768)");
  args.flag("vocab", "0", "vocabulary size of the model (0: 50304 for shards, GPT-2's 50257 padded; 256 for text)");
  args.flag("tokens", "0", "token ids in the data must be below this (0: 50257 for shards, GPT-2's tokenizer;\n"
                           "the vocabulary for text): the padding rows of the embedding never see a token");
  args.flag("batch", "4", "sequences per micro-step (B)");
  args.flag("seq", "64", "tokens per sequence (T), at most the model's block size");
  args.flag("steps", "100", "optimizer steps to run in total (a resumed run continues to this)");
  args.flag("grad-accum", "1", "micro-steps accumulated per optimizer step");
  args.flag("lr", "6e-4", "peak learning rate");
  args.flag("warmup", "10", "linear warmup steps");
  args.flag("min-lr-frac", "0.1", "cosine decay floor as a fraction of the peak");
  args.flag("weight-decay", "0.1", "weight decay (AdamW: 2-D weights only)");
  args.flag("optimizer", "adamw", "adamw (betas 0.9, 0.95) or sgd (with --momentum)");
  args.flag("momentum", "0.9", "SGD momentum");
  args.flag("clip", "1.0", "gradient clipping by global L2 norm (0: off)");
  ft::cli::add_device_flags(args);
  args.flag("seed", "0", "seed for initialization, shard shuffling and sampling");
  args.flag("shuffle", "1", "1: shuffle shard order each epoch; 0: in order");
  args.flag("log-every", "10", "steps between progress lines");
  args.flag("metrics", "", "write one JSON line per logged step to this file");
  args.flag("val-every", "0", "steps between validations (0: never)");
  args.flag("val-batches", "8", "batches per validation");
  ft::cli::add_checkpoint_flags(args);
  ft::cli::add_data_parallel_flags(args);
  args.flag("sample-every", "0", "steps between samples (byte-level models only; 0: never)");
  args.flag("sample-len", "128", "bytes per sample");
  args.flag("prompt", "", "text the samples start from");
  args.flag("temperature", "1.0", "sampling temperature (0: always the most likely token)");
  args.flag("top-k", "0", "sample among the k most likely tokens (0: all)");
  args.flag("init-from", "", "start from these weights: an ft-gpt2 checkpoint (a step_N folder or its\n"
                            "model.safetensors) or a Hugging Face GPT-2 model.safetensors (or its folder); the\n"
                            "--model preset must match its sizes");
  args.flag("lora-rank", "0", "LoRA fine-tuning: adapters of this rank on --lora-targets, the base frozen (0: off,\n"
                            "every weight trains)");
  args.flag("lora-alpha", "16", "LoRA scale numerator: the update is alpha/r * B*A");
  args.flag("lora-dropout", "0", "dropout on the adapters' input (0 takes the fastest path)");
  args.flag("lora-targets", "qkv,attn_proj,fc,mlp_proj", "comma-separated linears of each block to adapt: qkv,\n"
                            "attn_proj, fc, mlp_proj");
  args.flag("lora-rslora", "0", "1: scale by alpha/sqrt(r) (rank-stabilized LoRA) instead of alpha/r");
  args.flag("dump-dir", "", "write what tests/parity/gpt2_parity.py and lora_parity.py compare to this folder:\n"
                            "init.safetensors (the parameters this run starts from, after --init-from or\n"
                            "--resume), batches.safetensors (every step's inputs and targets) and\n"
                            "grads.safetensors (the gradients of this run's first step, before clipping, with its\n"
                            "loss and step number; after --resume, the first step after the checkpoint)");
  if (!args.parse(argc, argv)) return 0;

  // Every numeric flag is checked here, at the edge, even those only read later (sampling, LoRA).
  for (const char* name : {"top-k", "sample-len", "sample-every", "val-every", "val-batches", "warmup", "lora-rank"})
    (void)args.integer(name, 0);
  for (const char* name : {"temperature", "lr", "momentum", "weight-decay", "clip", "min-lr-frac", "lora-alpha",
                           "lora-dropout"})
    (void)args.number(name, 0);
  for (const char* name : {"batch", "seq", "steps", "grad-accum"}) (void)args.integer(name, 1);
  FT_CHECK(args.number("lora-dropout") < 1, "ft-gpt2: --lora-dropout must be below 1, got ", args.number("lora-dropout"));
  FT_CHECK(args.number("lora-alpha") > 0, "ft-gpt2: --lora-alpha must be positive, got ", args.number("lora-alpha"));
  FT_CHECK(args.number("min-lr-frac") <= 1, "ft-gpt2: --min-lr-frac is the floor as a fraction of the peak, at most 1, got ",
           args.number("min-lr-frac"));
  FT_CHECK(args.number("momentum") < 1, "ft-gpt2: --momentum must be below 1, got ", args.number("momentum"));
  FT_CHECK(!args.str("train").empty(), "ft-gpt2: --train is required (see --help)");
  const std::string format_name = args.str("format");
  FT_CHECK(format_name == "shards" || format_name == "text", "ft-gpt2: --format must be shards or text");
  const ft::TokenFormat format = format_name == "text" ? ft::TokenFormat::Text : ft::TokenFormat::Shards;
  int64_t vocab = args.integer("vocab", 0);
  if (vocab == 0) vocab = format == ft::TokenFormat::Text ? 256 : 50304;
  int64_t token_limit = args.integer("tokens", 0);
  if (token_limit == 0) token_limit = format == ft::TokenFormat::Text ? vocab : std::min<int64_t>(vocab, 50257);
  FT_CHECK(token_limit <= vocab, "ft-gpt2: --tokens ", token_limit, " exceeds the vocabulary (--vocab ", vocab, ")");
  const ft::GPTConfig config = preset(args.str("model"), vocab);
  const int64_t batch = args.integer("batch", 1), seq = args.integer("seq", 1), steps = args.integer("steps", 0);
  const int64_t accum = args.integer("grad-accum", 1);
  FT_CHECK(batch > 0 && seq > 0 && steps > 0 && accum > 0, "ft-gpt2: --batch, --seq, --steps, --grad-accum must be positive");
  FT_CHECK(seq <= config.block_size, "ft-gpt2: --seq ", seq, " exceeds the model's block size ", config.block_size);
  const ft::Device device = ft::cli::apply_device_flags(args, "ft-gpt2");
  const ft::DType dtype = device.is_cuda() ? ft::DType::BF16 : ft::DType::F32;
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", 0));

  // Joined before the data (each rank reads its part of every global batch) and the optimizer
  // (its buffers are laid out for the run's world size).
  ft::cli::DataParallelRun dp = ft::cli::join_data_parallel(args, "ft-gpt2", ft::launch_env(), device);
  const ft::TokenLoader::Options loader_options{.batch_size = batch, .seq_len = seq, .vocab_size = token_limit,
                                                .seed = seed, .shuffle = args.integer("shuffle", 0) != 0,
                                                .format = format, .shard = dp.shard()};
  ft::TokenLoader train(args.str("train"), loader_options);
  std::unique_ptr<ft::TokenLoader> val;
  if (!args.str("val").empty()) {
    ft::TokenLoader::Options o = loader_options;
    o.shuffle = false;
    val = std::make_unique<ft::TokenLoader>(args.str("val"), o);
  }

  ft::mark_startup("data");

  ft::GPT model(config, seed);
  if (!args.str("init-from").empty())
    std::printf("initialized from %s (%s)\n", args.str("init-from").c_str(),
                ft::init_gpt2_from(model, args.str("init-from")).c_str());
  model.to(device, dtype);
  const int64_t lora_rank = args.integer("lora-rank", 0);
  FT_CHECK(lora_rank >= 0, "ft-gpt2: --lora-rank must not be negative, got ", lora_rank);
  ft::PeftLoraConfig adapter;
  if (lora_rank > 0) {
    FT_CHECK(lora_rank <= config.channels, "ft-gpt2: --lora-rank ", lora_rank, " exceeds the model's width ",
             config.channels, " (a rank above the smaller side of a linear adds nothing)");
    ft::GPT::check_lora_targets(split_list(args.str("lora-targets")), "ft-gpt2: --lora-targets");
    adapter = {.r = lora_rank, .alpha = args.number("lora-alpha", 0), .dropout = args.number("lora-dropout", 0),
               .targets = split_list(args.str("lora-targets")), .rslora = args.integer("lora-rslora", 0) != 0,
               .base_model = args.str("init-from")};
    model.add_lora(ft::LoRAConfig{.rank = adapter.r, .alpha = adapter.alpha, .dropout = adapter.dropout,
                                  .rslora = adapter.rslora, .seed = seed},
                   adapter.targets, seed + 1);
  }
  ft::mark_startup("model");
  // Clipping and the non-finite check run inside the optimizer step, on the device.
  const ft::StepPolicy policy{.max_grad_norm = std::max(0.0, args.number("clip", 0))};
  std::unique_ptr<ft::Optimizer> optimizer_ptr;
  if (args.str("optimizer") == "adamw")
    optimizer_ptr = std::make_unique<ft::AdamW>(
        model.parameters(), ft::AdamW::Options{.lr = args.number("lr", 0), .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                               .weight_decay = args.number("weight-decay", 0), .policy = policy,
                                               .partition = dp.partition});
  else if (args.str("optimizer") == "sgd")
    optimizer_ptr = std::make_unique<ft::SGD>(
        model.parameters(), ft::SGD::Options{.lr = args.number("lr", 0), .momentum = args.number("momentum", 0),
                                             .weight_decay = args.number("weight-decay", 0), .policy = policy,
                                             .partition = dp.partition});
  else
    FT_FAIL("ft-gpt2: --optimizer must be adamw or sgd, got '", args.str("optimizer"), "'");
  ft::Optimizer& optimizer = *optimizer_ptr;
  const ft::cli::Resumed resumed = ft::cli::resume_from_flag(args, model, optimizer, {"epoch", "shard", "offset"});
  ft::cli::start_data_parallel(dp, args, "ft-gpt2", model, optimizer);
  ft::mark_startup("optimizer");
  const int64_t params = model.parameter_count(), trainable = model.trainable_parameter_count();
  if (dp.primary())
    std::printf("ft-gpt2: %lld parameters, %lld trainable (L=%lld C=%lld NH=%lld V=%lld) on %s (%s), kernels %s, "
              "B=%lld per process (global %lld) T=%lld, grad accum %lld, %lld steps\n",
              static_cast<long long>(params), static_cast<long long>(trainable), static_cast<long long>(config.layers),
              static_cast<long long>(config.channels), static_cast<long long>(config.heads),
              static_cast<long long>(vocab), device.str().c_str(), ft::dtype_name(dtype),
              ft::kernel_mode_name(ft::kernel_mode()), static_cast<long long>(batch),
              static_cast<long long>(batch * dp.env.world_size), static_cast<long long>(seq),
              static_cast<long long>(accum), static_cast<long long>(steps));

  ft::Trainer::Options options{
      .grad_accum = accum,
      .schedule = {.kind = ft::LRSchedule::Kind::WarmupCosine, .max_lr = args.number("lr", 0),
                   .warmup_steps = args.integer("warmup", 0), .total_steps = steps,
                   .min_lr = args.number("lr", 0) * args.number("min-lr-frac", 0)},
      .log_every = std::max<int64_t>(1, args.integer("log-every", 0)),
      .metrics_path = args.str("metrics"),
      .unit = "tok",
      .items_per_batch = batch * seq,
      // Per parameter per token: 2 FLOPs forward, 2 for the input gradient, 2 for its own gradient
      // when it trains (frozen ones have none); and the attention's 6·L·C·T.
      .flops_per_item = 4.0 * static_cast<double>(params) + 2.0 * static_cast<double>(trainable) +
                        6.0 * static_cast<double>(config.layers * config.channels * seq),
      .graph = ft::cli::graph_flag(args),
      .data_parallel = dp.get()};

  const int64_t val_every = args.integer("val-every", 0);
  if (val && val_every > 0) {
    options.eval_every = val_every;
    options.eval = [&](ft::Module&) {
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
      return std::map<std::string, double>{{"val loss", dp.get() ? dp.get()->mean_over_ranks(mean) : mean}};
    };
  }
  const int64_t sample_every = args.integer("sample-every", 0);
  if (sample_every > 0 && vocab == 256 && dp.primary())
    options.periodic.push_back({.every = sample_every, .run = [&](int64_t step) {
                                  std::printf("sample at step %lld:\n%s\n---\n", static_cast<long long>(step),
                                              sample(model, args.str("prompt"), args.integer("sample-len", 0),
                                                     args.number("temperature", 0), args.integer("top-k", 0),
                                                     seed + static_cast<uint64_t>(step), device)
                                                  .c_str());
                                }});
  ft::cli::wire_checkpoints(
      args, options, model, optimizer,
      [&](ft::DataPosition& run_state) {
        run_state["model"] = args.str("model");
        run_state["vocab"] = std::to_string(vocab);
      },
      [&](const std::string& folder) {
        // The adapters on their own too, as PEFT saves them (PeftModel.from_pretrained reads the folder).
        if (lora_rank > 0) ft::save_peft_adapter(folder, model.lora_state_dict(), adapter);
      });

  // Parity dumps (tests/parity/gpt2_parity.py): parameters in f32, batches as i64. The hook runs
  // every step eagerly, between backward and the optimizer step.
  const std::string dump_dir = args.str("dump-dir");
  auto named_f32 = [&](bool grads) {
    std::map<std::string, ft::Tensor> out;
    for (const auto& [name, p] : model.named_parameters())
      if (!grads || p.requires_grad()) out[name] = (grads ? p.grad() : p).to(ft::kCPU).to(ft::DType::F32);
    return out;
  };
  std::map<std::string, ft::Tensor> dumped_batches;
  bool gradients_dumped = false;
  if (!dump_dir.empty()) {
    std::filesystem::create_directories(dump_dir);
    ft::save_safetensors(dump_dir + "/init.safetensors", named_f32(false));
    options.after_backward = [&](int64_t step, const std::vector<ft::Batch>& micro_batches, const ft::Tensor& loss) {
      for (size_t micro = 0; micro < micro_batches.size(); ++micro) {
        const std::string key = std::to_string(step) + "." + std::to_string(micro);
        for (const char* name : {"inputs", "targets"}) {
          const ft::Tensor& t = micro_batches[micro].at(name);
          ft::Tensor copy = ft::Tensor::empty(t.shape(), ft::DType::I64, ft::kCPU);  // the batch's memory is reused
          copy.copy_(t);
          dumped_batches[std::string(name) + "." + key] = copy;
        }
      }
      if (!gradients_dumped) {
        char loss_text[32];
        std::snprintf(loss_text, sizeof loss_text, "%.9g", loss.item());
        ft::save_safetensors(dump_dir + "/grads.safetensors", named_f32(true),
                             {{"loss", loss_text}, {"step", std::to_string(step + 1)}});
        gradients_dumped = true;
      }
    };
  }

  ft::TokenBatchSource source(train);
  ft::Trainer trainer(model, optimizer, source,
                      [&](ft::Module&, const ft::Batch& b) { return model.loss(b.at("inputs"), b.at("targets")); },
                      options);
  if (!args.str("resume").empty()) {
    ft::cli::check_steps_left(resumed, steps, "ft-gpt2");
    trainer.resume(resumed.step, resumed.position);
  }
  const ft::FitSummary summary = trainer.fit(steps);
  if (!dump_dir.empty()) ft::save_safetensors(dump_dir + "/batches.safetensors", dumped_batches);
  // final_loss: the mean loss of the last logging window (one step's loss alone is too noisy to
  // judge a run by); wall_ms the wall clock per step, step_ms the steps alone (GPU events on CUDA).
  ft::cli::print_reduction_timing(dp, "ft-gpt2");
  if (dp.primary())
    std::printf("RESULT steps=%lld final_loss=%.4f uniform_loss=%.4f wall_ms=%.3f step_ms=%.3f\n",
              static_cast<long long>(trainer.step()), summary.final_loss, std::log(static_cast<double>(vocab)),
              summary.wall_ms, summary.step_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::cli::guarded_main([&] { return run(argc, argv); });
}
