// Checkpoints: a run resumed from a checkpoint reproduces the uninterrupted run's losses
// exactly (model, AdamW's or SGD's state, step count and data position all restored), and a crash while
// writing leaves the previous checkpoint as `latest`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "lib/error.h"
#include "models/gpt2/gpt.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"
#include "train/data/token_shards.h"
#include "train/io/checkpoint.h"
#include "train/io/checkpoint_records.h"
#include "train/io/safetensors.h"

namespace ft {
namespace {

using test::TempDir;

std::string write_text(const TempDir& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox " + std::to_string(i % 7) + ". ";
  const std::string path = dir.file("text.txt");
  std::ofstream(path) << text;
  return path;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, const std::vector<Tensor>& params) {
  if (kind == "sgd") return std::make_unique<SGD>(params, SGD::Options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  return std::make_unique<AdamW>(params, AdamW::Options{.lr = 1e-2});
}

struct TrainingRun {
  GPT model;
  std::unique_ptr<Optimizer> optimizer_ptr;
  Optimizer& optimizer;
  TokenLoader loader;
  TrainingRun(uint64_t seed, const std::string& text, const std::string& optimizer_kind = "adamw")
      : model(GPTConfig{.vocab = 256, .block_size = 16, .layers = 1, .heads = 2, .channels = 16}, seed),
        optimizer_ptr(make_optimizer(optimizer_kind, model.parameters())),
        optimizer(*optimizer_ptr),
        loader(text, TokenLoader::Options{.batch_size = 2, .seq_len = 16, .vocab_size = 256, .seed = 5,
                                          .shuffle = false, .format = TokenFormat::Text}) {}
  double step() {
    TokenBatch b = loader.next_batch();
    optimizer.zero_grad();
    Tensor loss = model.loss(b.inputs, b.targets);
    loss.backward();
    clip_grad_norm(optimizer.params(), 1.0);
    optimizer.step();
    return loss.item();
  }
  std::map<std::string, std::string> run_state() const {
    const TokenPosition p = loader.position();
    return {{"epoch", std::to_string(p.epoch)}, {"shard", std::to_string(p.shard)}, {"offset", std::to_string(p.offset)}};
  }
};

class CheckpointResume : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointResume, ReproducesTheUninterruptedRunExactly) {
  TempDir dir("ft_ckpt");
  const std::string text = write_text(dir), root = dir.file("ckpt");
  TrainingRun straight(1, text, GetParam());
  std::vector<double> losses;
  for (int s = 1; s <= 6; ++s) {
    losses.push_back(straight.step());
    if (s == 3) save_checkpoint(root, s, straight.model, straight.optimizer, straight.run_state());
  }
  TrainingRun resumed(99, text, GetParam());  // different initial weights: everything must come from the checkpoint
  const auto state = load_checkpoint(root, resumed.model, resumed.optimizer);
  EXPECT_EQ(resumed.optimizer.step_count(), 3);
  resumed.loader.set_position(
      TokenPosition{std::stoll(state.at("epoch")), std::stoll(state.at("shard")), std::stoll(state.at("offset"))});
  for (int s = 4; s <= 6; ++s) EXPECT_EQ(resumed.step(), losses[static_cast<size_t>(s - 1)]) << "step " << s;
}

// AdamW's moments and SGD's momentum buffer both live in the checkpoint (Optimizer::state).
INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointResume, ::testing::Values("adamw", "sgd"));

TEST(Checkpoint, SgdMomentumIsPartOfTheState) {
  const GPTConfig config{.vocab = 256, .block_size = 16, .layers = 1, .heads = 2, .channels = 16};
  GPT a(config, 3), b(config, 3);
  SGD with_momentum(a.parameters(), SGD::Options{.lr = 0.1, .momentum = 0.9});
  SGD plain(b.parameters(), SGD::Options{.lr = 0.1});
  EXPECT_EQ(with_momentum.state().count("0.momentum"), 1u);
  EXPECT_EQ(plain.state().count("0.momentum"), 0u);
  EXPECT_EQ(plain.state().count("0.master"), 1u);
  std::map<std::string, Tensor> missing = with_momentum.state();
  missing.erase("1.momentum");
  EXPECT_THROW(with_momentum.load_state(missing), Error);
}

TEST(Checkpoint, ModelFileHoldsNamedParametersAndLatestSurvivesAnInterruptedWrite) {
  TempDir dir("ft_ckpt");
  const std::string text = write_text(dir), root = dir.file("ckpt");
  TrainingRun run(2, text);
  run.step();
  const std::string folder = save_checkpoint(root, 1, run.model, run.optimizer, {});
  const SafetensorsFile weights = load_safetensors(folder + "/model.safetensors");
  EXPECT_TRUE(weights.tensors.count("wte.weight"));
  EXPECT_TRUE(weights.tensors.count("h.0.attn.c_attn.weight"));
  EXPECT_EQ(weights.tensors.size(), run.model.named_parameters().size());
  // A write that died half way leaves a .tmp folder; `latest` still names step 1.
  std::filesystem::create_directories(root + "/step_00000002.tmp");
  std::ofstream(root + "/step_00000002.tmp/model.safetensors") << "partial";
  TrainingRun other(3, text);
  EXPECT_NO_THROW(load_checkpoint(root, other.model, other.optimizer));
  EXPECT_EQ(other.model.state_dict().at("wte.weight").to_vector(), run.model.state_dict().at("wte.weight").to_vector());
  EXPECT_THROW(load_checkpoint(root + "/step_00000002.tmp", other.model, other.optimizer), Error);
}

// A crash at every stage of the save sequence, saving a new step and re-saving the same step (a
// run resumed into its own folder): the root always loads, as the old or the new checkpoint,
// never as a mix and never as an error.
TEST(Checkpoint, ACrashAtAnyStageOfTheSaveLeavesALoadableCheckpoint) {
  for (bool same_step : {false, true}) {
    for (int stage = 1; stage <= 5; ++stage) {
      TempDir dir("ft_ckpt");
      const std::string text = write_text(dir), root = dir.file("ckpt");
      TrainingRun run(2, text);
      run.step();
      save_checkpoint(root, 3, run.model, run.optimizer, {});
      const std::vector<double> old_weights = run.model.state_dict().at("wte.weight").to_vector();
      run.step();
      const std::vector<double> new_weights = run.model.state_dict().at("wte.weight").to_vector();
      ASSERT_NE(old_weights, new_weights);
      simulate_checkpoint_crash_after(stage);
      EXPECT_THROW(save_checkpoint(root, same_step ? 3 : 4, run.model, run.optimizer, {}), Error);
      TrainingRun other(9, text);
      ASSERT_NO_THROW(load_checkpoint(root, other.model, other.optimizer))
          << (same_step ? "re-saving" : "saving a new step") << ", crash after stage " << stage;
      const std::vector<double> loaded = other.model.state_dict().at("wte.weight").to_vector();
      EXPECT_TRUE(loaded == old_weights || loaded == new_weights) << "stage " << stage;
      // A new step counts once `latest` names it; a re-saved step once its old folder is gone.
      const bool new_one = same_step ? stage >= 3 : stage >= 5;
      EXPECT_EQ(loaded, new_one ? new_weights : old_weights) << "stage " << stage << ", same step " << same_step;
    }
  }
}

// A flipped bit, a truncated file: the manifest's CRC-32 and sizes refuse them.
TEST(Checkpoint, CorruptFilesAreRefused) {
  TempDir dir("ft_ckpt");
  const std::string text = write_text(dir), root = dir.file("ckpt");
  TrainingRun run(2, text);
  run.step();
  const std::string folder = save_checkpoint(root, 1, run.model, run.optimizer, {});
  const std::string optimizer_file = folder + "/optimizer.safetensors";
  const auto size = std::filesystem::file_size(optimizer_file);
  {
    std::fstream f(optimizer_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 5));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.put(static_cast<char>(c ^ 0x10));  // one bit of a saved master weight
  }
  TrainingRun other(3, text);
  EXPECT_FT_ERROR(load_checkpoint(root, other.model, other.optimizer), "fails its checksum");
  std::filesystem::resize_file(optimizer_file, size - 100);
  EXPECT_FT_ERROR(load_checkpoint(root, other.model, other.optimizer), "truncated");
}

// What load_checkpoint reads besides tensors (train/io/checkpoint_records.h; fuzzed by
// tests/fuzz/checkpoint_fuzz.cpp).
TEST(Checkpoint, ManifestAndCountersAreReadStrictly) {
  const std::vector<std::string> files = {"model.safetensors", "optimizer.safetensors"};
  const std::map<std::string, ManifestEntry> manifest = {{"model.safetensors", {.bytes = 120, .crc32 = 0xDEADBEEF}},
                                                         {"optimizer.safetensors", {.bytes = 0, .crc32 = 0}}};
  const auto back = parse_checkpoint_manifest(format_checkpoint_manifest(manifest), files, "m.json");
  EXPECT_EQ(back.at("model.safetensors").crc32, 0xDEADBEEFu);
  EXPECT_EQ(back.at("model.safetensors").bytes, 120);
  // A CRC-32 past 32 bits was cut to 32 and then matched a file it does not describe.
  EXPECT_FT_ERROR(parse_checkpoint_manifest("{\"model.safetensors\": {\"bytes\": 1, \"crc32\": 4294967297}, "
                                            "\"optimizer.safetensors\": {\"bytes\": 1, \"crc32\": 1}}",
                                            files, "m.json"),
                  "not a 32-bit checksum");
  EXPECT_FT_ERROR(parse_checkpoint_manifest("{\"model.safetensors\": {\"bytes\": 1}}", files, "m.json"),
                  "no size and crc32 for model.safetensors");

  const CheckpointCounters counters = parse_checkpoint_counters({{"step", "40"}, {"philox", "1234"}}, "dir");
  EXPECT_EQ(counters.step, 40);
  EXPECT_EQ(counters.philox, 1234u);
  EXPECT_FALSE(parse_checkpoint_counters({{"step", "0"}}, "dir").philox.has_value());
  EXPECT_FT_ERROR(parse_checkpoint_counters({}, "dir"), "has no step");
  EXPECT_FT_ERROR(parse_checkpoint_counters({{"step", "-1"}}, "dir"), "negative step");
  EXPECT_FT_ERROR(parse_checkpoint_counters({{"step", "+-1"}}, "dir"), "is not an integer");
  EXPECT_FT_ERROR(parse_checkpoint_counters({{"step", "1"}, {"philox", "-1"}}, "dir"), "bad philox counter");
}

TEST(Checkpoint, PruneKeepsTheNewestAndLatest) {
  TempDir dir("ft_ckpt");
  const std::string text = write_text(dir), root = dir.file("ckpt");
  TrainingRun run(2, text);
  for (int step = 1; step <= 5; ++step) save_checkpoint(root, step, run.model, run.optimizer, {});
  prune_checkpoints(root, 2);
  for (int step = 1; step <= 5; ++step)
    EXPECT_EQ(std::filesystem::exists(root + "/step_0000000" + std::to_string(step)), step >= 4) << step;
  EXPECT_FT_ERROR(prune_checkpoints(root, 0), "keep_last");
}

}  // namespace
}  // namespace ft
