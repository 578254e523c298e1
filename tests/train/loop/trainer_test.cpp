// The Trainer on the CPU, with an f64 model so that the checks can be tight: accumulating 4
// micro-batches of B rows takes the step of one batch of the same 4B rows; evaluation,
// checkpoints and periodic work run at their steps, in eval mode for evaluation, with the data
// position after the batches the steps took (not the prefetcher's read-ahead); a resumed run
// repeats the uninterrupted one bit for bit; a missing batch tensor, a diverging loss and a
// failing source are ft::Errors, and a trainer destroyed mid-run stops cleanly.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <future>
#include <thread>

#include "layers/linear.h"
#include "layers/sequential.h"
#include "lib/autograd.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/reduce/reduce.h"
#include "optim/sgd.h"
#include "tests/lib/test_util.h"
#include "train/data/batch_source.h"
#include "train/loop/trainer.h"

namespace ft {
namespace {

using namespace ft::test;

constexpr int64_t kIn = 6, kOut = 3;

std::shared_ptr<Sequential> small_model(uint64_t seed) {
  Generator gen(seed);
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Linear>(Linear::Options{.in = kIn, .out = 8, .activation = Activation::GELU}, gen));
  model->push_back(std::make_shared<Linear>(Linear::Options{.in = 8, .out = kOut}, gen));
  model->to(kCPU, DType::F64);
  return model;
}

// Mean squared error over every element: the mean makes the 1/accum scaling matter.
Tensor mse(Module& model, const Batch& batch) {
  const Tensor diff = model.forward(batch.at("x")) - batch.at("y");
  return mean((diff * diff).reshape({-1}));
}

// The batches it was given, in a loop; its position is the index of the next one.
class ListSource : public BatchSource {
 public:
  explicit ListSource(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  Batch next() override { return batches_[static_cast<size_t>(next_++) % batches_.size()]; }
  DataPosition position() const override { return {{"next", std::to_string(next_)}}; }
  void set_position(const DataPosition& p) override { next_ = std::stoll(p.at("next")); }

 private:
  std::vector<Batch> batches_;
  int64_t next_ = 0;
};

// `count` fresh random batches of `rows` rows.
std::vector<Batch> random_batches(int64_t count, int64_t rows, Generator& gen) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back({{"x", Tensor::randn({rows, kIn}, gen, DType::F64)}, {"y", Tensor::randn({rows, kOut}, gen, DType::F64)}});
  return out;
}

std::vector<std::vector<double>> values(const Module& model) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.to_vector());
  return out;
}

TEST(Trainer, AccumulatingFourMicroBatchesTakesTheStepOfTheirUnion) {
  constexpr int64_t B = 5, kSteps = 3;
  Generator gen = test_generator();
  // Every step's 4B rows, whole and as four micro-batches of B rows (views of the same rows).
  std::vector<Batch> whole = random_batches(kSteps, 4 * B, gen), micro;
  for (const Batch& w : whole)
    for (int64_t k = 0; k < 4; ++k)
      micro.push_back({{"x", w.at("x").narrow(0, k * B, B)}, {"y", w.at("y").narrow(0, k * B, B)}});
  auto train = [&](std::vector<Batch> batches, int64_t accum) {
    auto model = small_model(3);
    SGD optimizer(model->parameters(), SGD::Options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    ListSource source(std::move(batches));
    Trainer trainer(*model, optimizer, source, mse,
                    Trainer::Options{.grad_accum = accum, .schedule = {.max_lr = 0.1}, .log_every = 0});
    const FitSummary summary = trainer.fit(kSteps);
    EXPECT_EQ(summary.steps, kSteps);
    EXPECT_EQ(trainer.data_position(), (DataPosition{{"next", std::to_string(kSteps * accum)}}));
    return values(*model);
  };
  const auto initial = values(*small_model(3));
  const auto one = train(whole, 1), four = train(micro, 4);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    const Tensor a = Tensor::from_vector(four[i], {static_cast<int64_t>(four[i].size())}, DType::F64);
    const Tensor b = Tensor::from_vector(one[i], {static_cast<int64_t>(one[i].size())}, DType::F64);
    const Tensor start = Tensor::from_vector(initial[i], {static_cast<int64_t>(initial[i].size())}, DType::F64);
    EXPECT_LT(max_rel_error(a, b), 1e-12) << "parameter " << i;
    EXPECT_GT(max_rel_error(start, b), 1e-3) << "parameter " << i << " did not move";
  }
}

TEST(Trainer, EvaluationCheckpointsAndPeriodicWorkRunAtTheirSteps) {
  Generator gen = test_generator();
  auto model = small_model(4);
  SGD optimizer(model->parameters(), SGD::Options{.lr = 0.05});
  ListSource source(random_batches(7, 4, gen));
  const LRSchedule schedule{.kind = LRSchedule::Kind::WarmupCosine, .max_lr = 0.05, .warmup_steps = 2,
                            .total_steps = 10};
  std::vector<int64_t> evals, checkpoints, periodic;
  std::vector<DataPosition> positions;
  Trainer* trainer_in_use = nullptr;
  Trainer::Options options{.grad_accum = 2, .schedule = schedule, .log_every = 4};
  options.eval_every = 3;
  options.eval = [&](Module& m) {
    EXPECT_FALSE(m.is_training());
    EXPECT_FALSE(grad_mode_enabled());
    const int64_t step = trainer_in_use->step();
    // The schedule's rate for the step just taken (steps are 0-based in the schedule).
    EXPECT_DOUBLE_EQ(optimizer.lr(), schedule.at(step - 1));
    evals.push_back(step);
    return std::map<std::string, double>{{"metric", static_cast<double>(step)}};
  };
  options.checkpoint_every = 4;
  options.checkpoint = [&](int64_t step, const DataPosition& position) {
    checkpoints.push_back(step);
    positions.push_back(position);
  };
  options.periodic.push_back({.every = 5, .run = [&](int64_t step) { periodic.push_back(step); }});
  Trainer trainer(*model, optimizer, source, mse, options);
  trainer_in_use = &trainer;
  const FitSummary summary = trainer.fit(10);
  EXPECT_EQ(evals, (std::vector<int64_t>{3, 6, 9, 10}));  // every 3 steps and at the last
  EXPECT_EQ(checkpoints, (std::vector<int64_t>{4, 8, 10}));
  // Two micro-batches a step: the position is that of the batches taken, not of the read-ahead.
  EXPECT_EQ(positions, (std::vector<DataPosition>{{{"next", "8"}}, {{"next", "16"}}, {{"next", "20"}}}));
  EXPECT_EQ(periodic, (std::vector<int64_t>{5, 10}));
  EXPECT_EQ(summary.eval, (std::map<std::string, double>{{"metric", 10.0}}));
  EXPECT_TRUE(model->is_training());
  EXPECT_TRUE(std::isfinite(summary.final_loss));
  EXPECT_GT(summary.wall_ms, 0.0);
  EXPECT_EQ(summary.timed_steps, 10 - 3);  // after the warm-up
}

TEST(Trainer, AResumedRunRepeatsTheUninterruptedOneExactly) {
  Generator gen = test_generator();
  const std::vector<Batch> batches = random_batches(5, 4, gen);
  const LRSchedule schedule{.kind = LRSchedule::Kind::WarmupCosine, .max_lr = 0.05, .warmup_steps = 2,
                            .total_steps = 8};
  // Plain SGD keeps no state besides the parameters, so they alone checkpoint the run.
  std::map<std::string, Tensor> saved_params;
  DataPosition saved_position;
  auto whole = small_model(6);
  {
    SGD optimizer(whole->parameters(), SGD::Options{.lr = 0.05});
    ListSource source(batches);
    Trainer::Options options{.schedule = schedule, .log_every = 0, .checkpoint_every = 3};
    options.checkpoint = [&](int64_t step, const DataPosition& position) {
      if (step != 3) return;
      for (const auto& [name, p] : whole->state_dict()) {
        saved_params[name] = Tensor::empty(p.shape(), p.dtype());
        saved_params[name].copy_(p);
      }
      saved_position = position;
    };
    Trainer(*whole, optimizer, source, mse, options).fit(8);
  }
  auto resumed = small_model(99);  // other initial values, replaced by the checkpoint's
  resumed->load_state_dict(saved_params);
  SGD optimizer(resumed->parameters(), SGD::Options{.lr = 0.05});
  ListSource source(batches);
  Trainer trainer(*resumed, optimizer, source, mse, Trainer::Options{.schedule = schedule, .log_every = 0});
  trainer.resume(3, saved_position);
  trainer.fit(8);
  EXPECT_EQ(trainer.step(), 8);
  EXPECT_EQ(values(*resumed), values(*whole));
  EXPECT_FT_ERROR(trainer.resume(0, {}), "started");
}

// The losses a run's --metrics file logged: step -> (loss, how many steps it is the mean of).
std::map<int64_t, std::pair<double, int64_t>> logged_losses(const std::string& path) {
  std::map<int64_t, std::pair<double, int64_t>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    long long step = 0, steps = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %lld, \"loss\": %lf, \"loss_steps\": %lld", &step, &loss, &steps) == 3)
      out[step] = {loss, steps};
  }
  return out;
}

// A line's loss is the mean of the steps since the previous line: a run logging every 4 steps
// shows the mean of the 4 losses a run logging every step shows (same seeds, same steps), and
// the summary's final loss is the last window's.
TEST(Trainer, ALineShowsTheMeanLossSinceTheLastLine) {
  const std::string dir = ::testing::TempDir();
  std::map<int64_t, std::pair<double, int64_t>> logged[2];
  double final_loss[2] = {};
  for (int run = 0; run < 2; ++run) {
    Generator gen = test_generator();
    auto model = small_model(5);
    SGD optimizer(model->parameters(), SGD::Options{.lr = 0.05});
    ListSource source(random_batches(5, 4, gen));
    const std::string path = dir + "/window_loss_" + std::to_string(run) + ".jsonl";
    Trainer trainer(*model, optimizer, source, mse, {.log_every = run == 0 ? 1 : 4, .metrics_path = path});
    final_loss[run] = trainer.fit(12).final_loss;
    logged[run] = logged_losses(path);
  }
  ASSERT_EQ(logged[0].size(), 12u);
  ASSERT_EQ(logged[1].size(), 3u);
  for (const auto& [step, entry] : logged[1]) {
    double sum = 0;
    for (int64_t s = step - 3; s <= step; ++s) {
      EXPECT_EQ(logged[0].at(s).second, 1) << "step " << s;
      sum += logged[0].at(s).first;
    }
    EXPECT_EQ(entry.second, 4) << "step " << step;
    // The window's sum is kept in f32 on the device, and the file holds 9 digits.
    EXPECT_NEAR(entry.first, sum / 4, 1e-6 * std::abs(sum / 4)) << "step " << step;
  }
  EXPECT_NEAR(final_loss[1], logged[1].at(12).first, 1e-8 * final_loss[1]);
  EXPECT_NEAR(final_loss[0], logged[0].at(12).first, 1e-8 * final_loss[0]);
}

TEST(Trainer, AMissingBatchTensorIsAnErrorNamingIt) {
  Generator gen = test_generator();
  auto model = small_model(7);
  SGD optimizer(model->parameters(), SGD::Options{.lr = 0.05});
  ListSource source(random_batches(2, 4, gen));
  Trainer trainer(*model, optimizer, source,
                  [](Module& m, const Batch& b) { return mean(m.forward(b.at("features")).reshape({-1})); },
                  Trainer::Options{.log_every = 0});
  EXPECT_FT_ERROR(trainer.fit(1), "'features'");
}

TEST(Trainer, ANonFiniteLossIsTrainingDivergedAtItsStep) {
  Generator gen = test_generator();
  auto model = small_model(8);
  SGD optimizer(model->parameters(), SGD::Options{.lr = 0.05});
  ListSource source(random_batches(2, 4, gen));
  int64_t calls = 0;
  Trainer trainer(*model, optimizer, source,
                  [&](Module& m, const Batch& b) { return mse(m, b) * (++calls >= 3 ? NAN : 1.0); },
                  Trainer::Options{.log_every = 1});
  try {
    trainer.fit(5);
    FAIL() << "a NaN loss must stop training";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("training diverged"), std::string::npos) << what;
    EXPECT_NE(what.find("at step 3"), std::string::npos) << what;
  }
}

// A source that fails after a few batches, then a trainer dropped while its loader waits.
TEST(Trainer, ASourceErrorStopsFitAndTheTrainerStopsCleanly) {
  class Failing : public BatchSource {
   public:
    Batch next() override {
      FT_CHECK(++calls_ <= 3, "token shard 'train_07.bin' is truncated");
      return {{"x", Tensor::randn({4, kIn}, gen_, DType::F64)}, {"y", Tensor::randn({4, kOut}, gen_, DType::F64)}};
    }

   private:
    int calls_ = 0;
    Generator gen_{9};
  };
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([done] {
    auto model = small_model(9);
    SGD optimizer(model->parameters(), SGD::Options{.lr = 0.05});
    Failing failing;
    {
      Trainer trainer(*model, optimizer, failing, mse, Trainer::Options{.log_every = 0});
      EXPECT_FT_ERROR(trainer.fit(10), "train_07.bin");
    }
    Generator gen(1);
    ListSource endless(random_batches(3, 4, gen));
    {
      Trainer trainer(*model, optimizer, endless, mse, Trainer::Options{.log_every = 0, .prefetch_depth = 2});
      trainer.fit(2);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the loader fills its slots and waits
    }
    done->set_value();
  }).detach();
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "a trainer hung";
}

}  // namespace
}  // namespace ft
