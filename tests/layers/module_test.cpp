// Module bookkeeping: parameter names and order, frozen parameters, strict and non-strict
// state dicts, train/eval propagation, moving in place, and the layers' forward passes against
// their ops.
#include <gtest/gtest.h>

#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/reduce/reduce.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

std::shared_ptr<Sequential> small_model(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Linear>(Linear::Options{.in = 5, .out = 4}, gen));
  m->push_back(std::make_shared<LayerNorm>(4));
  m->push_back(std::make_shared<GELU>());
  m->push_back(std::make_shared<Dropout>(0.5, 3));
  m->push_back(std::make_shared<Linear>(Linear::Options{.in = 4, .out = 2, .bias = false}, gen));
  return m;
}

TEST(Module, NamesParametersInRegistrationOrder) {
  Generator gen(1);
  auto m = small_model(gen);
  std::vector<std::string> names;
  for (auto& [name, t] : m->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "4.weight"}));
  EXPECT_EQ(m->parameter_count(), 5 * 4 + 4 + 4 + 4 + 4 * 2);
  for (const Tensor& p : m->parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, RankLocalChildrenLeaveTheReplicatedStateDict) {
  Generator gen(1);
  auto m = small_model(gen);
  EXPECT_FALSE(m->has_rank_local_state());
  EXPECT_EQ(m->replicated_state_dict().size(), m->state_dict().size());
  auto shard = std::make_shared<Linear>(Linear::Options{.in = 2, .out = 3}, gen);
  shard->set_rank_local();
  m->push_back(shard);
  EXPECT_TRUE(m->has_rank_local_state());
  const auto all = m->state_dict(), replicated = m->replicated_state_dict();
  EXPECT_EQ(all.size(), replicated.size() + 2);
  EXPECT_TRUE(all.count("5.weight") && all.count("5.bias"));
  EXPECT_FALSE(replicated.count("5.weight") || replicated.count("5.bias"));
  EXPECT_TRUE(replicated.count("0.weight") && replicated.count("4.weight"));
}

TEST(Module, StateDictRoundTripsIntoAFreshModel) {
  Generator g1(1), g2(2);
  auto a = small_model(g1), b = small_model(g2);
  EXPECT_NE(a->parameters()[0].to_vector(), b->parameters()[0].to_vector());
  b->load_state_dict(a->state_dict());
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_EQ(a->parameters()[i].to_vector(), b->parameters()[i].to_vector());
}

TEST(Module, LoadStateDictRejectsMissingAndMisshapen) {
  Generator gen(1);
  auto m = small_model(gen);
  auto state = m->state_dict();
  state.erase("0.bias");
  EXPECT_THROW(m->load_state_dict(state), Error);
  state = m->state_dict();
  state["0.bias"] = Tensor::zeros({5});
  EXPECT_THROW(m->load_state_dict(state), Error);
}

// A frozen base product plus a trainable linear, as LoRA freezes its base weight.
class Adapted : public Module {
 public:
  explicit Adapted(Generator& gen) {
    base_ = register_parameter("base", Tensor::randn({4, 3}, gen), /*trainable=*/false);
    scale_ = register_parameter("scale", Tensor::randn({4}, gen));
    fc_ = register_module("fc", std::make_shared<Linear>(Linear::Options{.in = 3, .out = 4}, gen));
  }
  Tensor forward(const Tensor& x) override { return fc_->forward(x) + matmul(x, base_, false, true) * scale_; }
  const Tensor& base() const { return base_; }

 private:
  Tensor base_, scale_;
  std::shared_ptr<Linear> fc_;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (auto& [name, t] : named) out.push_back(name);
  return out;
}

TEST(Module, FrozenAtRegistrationStaysInTheStateDictButNotInTrainableParameters) {
  Generator gen(11);
  Adapted m(gen);
  EXPECT_FALSE(m.base().requires_grad());
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"base", "scale", "fc.weight", "fc.bias"}));
  EXPECT_EQ(names_of(m.named_trainable_parameters("m.")),
            (std::vector<std::string>{"m.scale", "m.fc.weight", "m.fc.bias"}));
  EXPECT_EQ(m.trainable_parameters().size(), 3u);
  for (const Tensor& p : m.trainable_parameters()) EXPECT_NE(p.impl(), m.base().impl());
  EXPECT_EQ(m.parameter_count(), 12 + 4 + 12 + 4);
  EXPECT_EQ(m.trainable_parameter_count(), 4 + 12 + 4);
  const auto state = m.state_dict();
  ASSERT_EQ(state.count("base"), 1u);
  EXPECT_TRUE(state.at("base").shares_storage(m.base()));
  EXPECT_EQ(state.size(), 4u);
}

TEST(Module, SetTrainableFlipsRequiresGradOnTheSameTensors) {
  Generator gen(12);
  auto m = small_model(gen);
  const std::vector<Tensor> before = m->parameters();
  m->set_trainable(false);
  EXPECT_TRUE(m->trainable_parameters().empty());
  EXPECT_EQ(m->trainable_parameter_count(), 0);
  m->set_trainable("0", true);  // a child's prefix: 0.weight and 0.bias
  EXPECT_EQ(names_of(m->named_trainable_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  m->set_trainable(true);
  m->set_trainable("4.weight", false);  // one parameter by its full name
  EXPECT_EQ(names_of(m->named_trainable_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  const std::vector<Tensor> after = m->parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].impl(), before[i].impl()) << "parameter " << i;
  EXPECT_FALSE(before[4].requires_grad());
  EXPECT_TRUE(before[0].requires_grad());
  EXPECT_EQ(m->state_dict().size(), 5u);
}

TEST(Module, SetTrainableRejectsAnUnknownNameAndPartialPrefixes) {
  Generator gen(13);
  auto m = small_model(gen);
  EXPECT_THROW(m->set_trainable("7", false), Error);
  EXPECT_TRUE(test::error_mentions([&] { m->set_trainable("0.wei", false); }, "'0.wei'"));
  for (const Tensor& p : m->parameters()) EXPECT_TRUE(p.requires_grad()) << "a failed call must change nothing";
}

TEST(Module, FrozenParameterGetsNoGradient) {
  Generator gen(14);
  Adapted m(gen);
  m.set_trainable("fc.bias", false);
  Tensor x = Tensor::randn({5, 3}, gen);
  sum_all(m.forward(x)).backward();
  for (auto& [name, p] : m.named_parameters()) {
    const bool frozen = name == "base" || name == "fc.bias";
    EXPECT_EQ(p.grad().defined(), !frozen) << name;
  }
  // Freezing after a backward drops the gradient: frozen parameters hold no gradient storage.
  m.set_trainable("scale", false);
  EXPECT_FALSE(m.named_parameters()[1].second.grad().defined());
}

TEST(Module, StrictLoadListsEveryProblemAndLoadsNothing) {
  Generator g1(15), g2(16);
  Adapted source(g1), target(g2);
  auto state = source.state_dict();
  state.erase("scale");
  state.erase("fc.bias");
  state["fc.weight"] = Tensor::randn({3, 4}, g1);  // transposed
  state["extra.weight"] = Tensor::randn({2}, g1);
  state["fc.gain"] = Tensor::randn({4}, g1);
  std::vector<std::vector<double>> before;
  for (const Tensor& p : target.parameters()) before.push_back(p.to_vector());
  try {
    target.load_state_dict(state);
    FAIL() << "a strict load of a mismatched state must throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* word : {"scale", "fc.bias", "extra.weight", "fc.gain", "fc.weight: got [3, 4], expected [4, 3]"})
      EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' not in: " << message;
  }
  // "base" matched in name and shape, but a strict failure loads nothing.
  const std::vector<Tensor> after = target.parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].to_vector(), before[i]) << "parameter " << i;
}

TEST(Module, NonStrictLoadCopiesTheMatchesAndReportsTheRest) {
  Generator g1(17), g2(18);
  Adapted source(g1), target(g2);
  auto state = source.state_dict();
  state.erase("scale");
  state["fc.weight"] = Tensor::randn({3, 4}, g1);
  state["extra"] = Tensor::randn({2}, g1);
  state["base"] = state["base"].to(DType::F64);  // dtype converted on the way in
  const Tensor fc_weight = target.named_parameters()[2].second;
  const std::vector<double> scale_before = target.named_parameters()[1].second.to_vector();
  const std::vector<double> fc_weight_before = fc_weight.to_vector();
  const Tensor base = target.base();

  const LoadReport report = target.load_state_dict(state, /*strict=*/false);
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"base", "fc.bias"}));
  EXPECT_EQ(report.missing, (std::vector<std::string>{"scale"}));
  EXPECT_EQ(report.unexpected, (std::vector<std::string>{"extra"}));
  EXPECT_EQ(report.mismatched, (std::vector<std::string>{"fc.weight: got [3, 4], expected [4, 3]"}));
  EXPECT_NE(report.str().find("1 missing: scale"), std::string::npos) << report.str();

  EXPECT_EQ(target.base().impl(), base.impl()) << "values are copied in place";
  EXPECT_EQ(target.base().dtype(), DType::F32);
  EXPECT_FALSE(target.base().requires_grad()) << "loading keeps a parameter frozen";
  EXPECT_EQ(target.base().to_vector(), source.base().to_vector());
  EXPECT_EQ(target.named_parameters()[3].second.to_vector(), source.named_parameters()[3].second.to_vector());
  EXPECT_EQ(target.named_parameters()[1].second.to_vector(), scale_before);
  EXPECT_EQ(fc_weight.to_vector(), fc_weight_before);

  const LoadReport full = target.load_state_dict(source.state_dict(), /*strict=*/false);
  EXPECT_TRUE(full.ok());
  EXPECT_EQ(full.str(), "");
  EXPECT_EQ(full.loaded.size(), 4u);
}

TEST(Module, EvalReachesChildrenAndDisablesDropout) {
  Generator gen(1);
  auto m = small_model(gen);
  Tensor x = Tensor::randn({3, 5}, gen);
  m->eval();
  const std::vector<double> first = m->forward(x).to_vector();
  EXPECT_EQ(m->forward(x).to_vector(), first) << "eval forward must be deterministic";
  m->train();
  EXPECT_NE(m->forward(x).to_vector(), m->forward(x).to_vector()) << "training dropout draws fresh masks";
}

TEST(Module, ToKeepsTensorIdentity) {
  Generator gen(1);
  auto m = small_model(gen);
  Tensor w = m->parameters()[0];
  const std::vector<double> before = w.to_vector();
  m->to(kCPU, DType::F64);
  EXPECT_EQ(w.dtype(), DType::F64);
  EXPECT_EQ(w.to_vector(), before);  // f32 values are exact in f64
}

TEST(Layers, LinearAndLayerNormForwardMatchTheirOps) {
  Generator gen(4);
  Linear fc(Linear::Options{.in = 6, .out = 3, .activation = Activation::ReLU}, gen);
  Tensor x = Tensor::randn({2, 6}, gen);
  const Tensor expected = relu(linear_composite(x, fc.weight(), fc.bias(), Activation::None));
  EXPECT_EQ(fc.forward(x).to_vector(), expected.to_vector());
  for (double w : fc.weight().to_vector()) EXPECT_LE(std::abs(w), 1.0 / std::sqrt(6.0));
  LayerNorm ln(6);
  EXPECT_EQ(ln.forward(x).to_vector(),
            layer_norm(x, Tensor::full({6}, 1.0), Tensor::zeros({6})).to_vector());
}

// GPT builds its Linears with init = false and draws its own weights after them: the skipped
// uniform draws must still be reserved, or every later draw (and so every seed's model) moves.
TEST(Layers, LinearWithoutInitReservesTheDrawsItSkips) {
  for (bool bias : {true, false}) {
    Generator drawn(21), skipped(21);
    Linear a(Linear::Options{.in = 7, .out = 5, .bias = bias}, drawn);
    Linear b(Linear::Options{.in = 7, .out = 5, .bias = bias, .init = false}, skipped);
    EXPECT_EQ(skipped.offset(), drawn.offset());
    EXPECT_EQ(b.weight().shape(), a.weight().shape());
    EXPECT_EQ(b.bias().defined(), bias);
    EXPECT_TRUE(b.weight().requires_grad());
    EXPECT_EQ(Tensor::randn({9}, skipped).to_vector(), Tensor::randn({9}, drawn).to_vector());
  }
}

}  // namespace
}  // namespace ft
