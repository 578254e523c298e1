// Module bookkeeping: parameter names and order, state dicts, train/eval propagation, moving
// in place, and the layers' forward passes against their ops.
#include <gtest/gtest.h>

#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"
#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/ops/layer_norm.h"

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

}  // namespace
}  // namespace ft
