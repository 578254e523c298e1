// AdamW and SGD against step-by-step f64 references written out in the test, and the LR
// schedules against their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

namespace ft {
namespace {

struct AdamRef {  // one tensor's state in plain doubles
  std::vector<double> p, m, v;
};

void adamw_reference_step(AdamRef& s, const std::vector<double>& g, int64_t t, double lr, double b1, double b2,
                          double eps, double wd, bool decay) {
  for (size_t i = 0; i < s.p.size(); ++i) {
    s.m[i] = b1 * s.m[i] + (1 - b1) * g[i];
    s.v[i] = b2 * s.v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = s.m[i] / (1 - std::pow(b1, t)), vhat = s.v[i] / (1 - std::pow(b2, t));
    if (decay) s.p[i] *= 1 - lr * wd;
    s.p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

TEST(AdamW, MatchesReferenceOverStepsWithDecayOnlyOnMatrices) {
  Generator gen(11);
  Tensor w = Tensor::randn({5, 3}, gen, DType::F64);
  Tensor b = Tensor::randn({3}, gen, DType::F64);
  w.requires_grad_();
  b.requires_grad_();
  AdamRef rw{w.to_vector(), std::vector<double>(15), std::vector<double>(15)};
  AdamRef rb{b.to_vector(), std::vector<double>(3), std::vector<double>(3)};
  const AdamW::Options o{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.3};
  AdamW opt({w, b}, o);
  for (int64_t t = 1; t <= 5; ++t) {
    Tensor gw = Tensor::randn({5, 3}, gen, DType::F64), gb = Tensor::randn({3}, gen, DType::F64);
    w.set_grad(gw);
    b.set_grad(gb);
    opt.step();
    adamw_reference_step(rw, gw.to_vector(), t, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, true);
    adamw_reference_step(rb, gb.to_vector(), t, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, false);
    const std::vector<double> pw = w.to_vector(), pb = b.to_vector();
    for (size_t i = 0; i < pw.size(); ++i) EXPECT_NEAR(pw[i], rw.p[i], 1e-12) << "step " << t << " w[" << i << "]";
    for (size_t i = 0; i < pb.size(); ++i) EXPECT_NEAR(pb[i], rb.p[i], 1e-12) << "step " << t << " b[" << i << "]";
  }
}

// Gradients are persistent (a GradBuffer view, zero until a backward reaches the parameter): a
// parameter nothing reached gets a zero gradient, which moves neither it nor, without decay, its
// value (1-D parameters do not decay by default).
TEST(AdamW, AZeroGradientLeavesAnUndecayedParameterUnchanged) {
  Generator gen(3);
  Tensor w = Tensor::randn({4}, gen, DType::F32);
  w.requires_grad_();
  const std::vector<double> before = w.to_vector();
  AdamW opt({w}, AdamW::Options{});
  opt.step();
  EXPECT_EQ(w.to_vector(), before);
}

TEST(AdamW, Bf16ParametersKeepAnF32MasterSoSmallUpdatesAccumulate) {
  // A bf16 weight of 1.0 cannot move by 1e-4 in one step (its spacing is 2^-7), but the f32
  // master accumulates 100 such steps into a visible change.
  Tensor w = Tensor::full({8}, 1.0, DType::BF16);
  w.requires_grad_();
  AdamW opt({w}, AdamW::Options{.lr = 1e-4, .weight_decay = 0.0});
  for (int i = 0; i < 100; ++i) {
    w.set_grad(Tensor::full({8}, 1.0, DType::BF16));
    opt.step();
  }
  for (double x : w.to_vector()) EXPECT_NEAR(x, 1.0 - 100 * 1e-4, 4e-3);
  EXPECT_LT(w.to_vector()[0], 1.0);
}

TEST(SGD, MomentumAndWeightDecayMatchReference) {
  Generator gen(5);
  Tensor p = Tensor::randn({6}, gen, DType::F64);
  p.requires_grad_();
  std::vector<double> ref = p.to_vector(), buf(6, 0.0);
  const SGD::Options o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  SGD opt({p}, o);
  for (int t = 0; t < 4; ++t) {
    Tensor g = Tensor::randn({6}, gen, DType::F64);
    p.set_grad(g);
    opt.step();
    const std::vector<double> gv = g.to_vector();
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = gv[i] + o.weight_decay * ref[i];
      buf[i] = t == 0 ? d : o.momentum * buf[i] + d;
      ref[i] -= o.lr * buf[i];
    }
    const std::vector<double> pv = p.to_vector();
    for (size_t i = 0; i < pv.size(); ++i) EXPECT_NEAR(pv[i], ref[i], 1e-12);
  }
}

TEST(Optimizer, GradNormIsTheGlobalL2Norm) {
  Generator gen(9);
  Tensor a = Tensor::randn({3, 2}, gen, DType::F32), b = Tensor::randn({5}, gen, DType::F32);
  a.requires_grad_();
  b.requires_grad_();
  a.set_grad(Tensor::randn({3, 2}, gen, DType::F32));
  b.set_grad(Tensor::randn({5}, gen, DType::F32));
  double sq = 0;
  for (const Tensor& t : {a.grad(), b.grad()})
    for (double x : t.to_vector()) sq += x * x;
  EXPECT_NEAR(grad_norm({a, b}).item(), std::sqrt(sq), 1e-5);
}

TEST(Optimizer, RejectsNonLeafOrOnlyFrozenParameters) {
  Tensor frozen = Tensor::full({2}, 1.0);
  EXPECT_THROW(AdamW({frozen}, AdamW::Options{}), Error);
  Tensor leaf = Tensor::full({2}, 1.0);
  leaf.requires_grad_();
  EXPECT_THROW(AdamW({leaf * 2.0}, AdamW::Options{}), Error);
}

TEST(LRSchedule, WarmupThenCosineToMin) {
  LRSchedule s{.kind = LRSchedule::Kind::WarmupCosine, .max_lr = 1.0, .warmup_steps = 4, .total_steps = 14,
               .min_lr = 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(9), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.5)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);
  LRSchedule c{.max_lr = 3e-4};
  EXPECT_DOUBLE_EQ(c.at(0), 3e-4);
  EXPECT_DOUBLE_EQ(c.at(1000), 3e-4);
}

TEST(AdamW, CudaMatchesCpuOverSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(21);
  Tensor init = Tensor::randn({33, 7}, gen, DType::F32);
  Tensor cpu_p = Tensor::empty(init.shape()), gpu_p = init.to(kCUDA);
  cpu_p.copy_(init);
  cpu_p.requires_grad_();
  gpu_p.requires_grad_();
  AdamW cpu_opt({cpu_p}, AdamW::Options{.lr = 1e-2}), gpu_opt({gpu_p}, AdamW::Options{.lr = 1e-2});
  for (int t = 0; t < 10; ++t) {
    Tensor g = Tensor::randn({33, 7}, gen, DType::F32);
    cpu_p.set_grad(g);
    gpu_p.set_grad(g.to(kCUDA));
    cpu_opt.step();
    gpu_opt.step();
  }
  const std::vector<double> a = cpu_p.to_vector(), b = gpu_p.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

}  // namespace
}  // namespace ft
