// The define-by-run autograd: shared subexpressions, accumulation into leaves across backward
// calls, NoGradGuard, a tensor used twice by one op, freeing the graph (and retain_graph),
// which tensors may require grad, completes_input_gradient, and KernelModeGuard /
// parse_kernel_mode.
// Expected gradients here are derived by hand from the expressions, in doubles.
#include <cmath>
#include <vector>

#include "lib/autograd.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// Elementwise f over x's values, as an f64 CPU tensor of x's shape.
Tensor map_values(const Tensor& x, double (*f)(double)) {
  std::vector<double> v = x.to_vector();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape(), DType::F64);
}

TEST(AutogradTest, SharedSubexpression) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3, 5}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = x * x + x;  // x reaches the sum twice: directly and through the product
  sum_all(y).backward();
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * v + 1; }), 1e-15));
}

TEST(AutogradTest, NonLeafUsedTwice) {
  Generator gen = test_generator();
  Tensor x = random_tensor({7}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor h = exp(x);
  sum_all(h * h + h).backward();  // d/dx (e^2x + e^x) = 2 e^2x + e^x
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * std::exp(2 * v) + std::exp(v); }), 1e-14));
}

TEST(AutogradTest, TensorUsedTwiceInOneOp) {
  Generator gen = test_generator();
  Tensor x = random_tensor({4, 3}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(mul(x, x)).backward();
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * v; }), 1e-15));
  Tensor z = random_tensor({4, 3}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(add(z, z)).backward();
  EXPECT_TRUE(all_equal(z.grad(), Tensor::full({4, 3}, 2.0, DType::F64)));
  // The same matrix on both sides of a product: d/dA sum(A·Aᵀ) = 2 · (row sums of A, broadcast).
  Tensor a = random_tensor({3, 4}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(matmul(a, a, false, true)).backward();
  const std::vector<double> va = a.to_vector();
  std::vector<double> expected(12);
  for (int j = 0; j < 4; ++j) {
    double column = 0.0;
    for (int i = 0; i < 3; ++i) column += va[static_cast<size_t>(i * 4 + j)];
    for (int i = 0; i < 3; ++i) expected[static_cast<size_t>(i * 4 + j)] = 2 * column;
  }
  EXPECT_TRUE(all_close(a.grad(), Tensor::from_vector(expected, {3, 4}, DType::F64), 1e-14));
}

TEST(AutogradTest, GradientsAccumulateAcrossBackwardCalls) {
  Generator gen = test_generator();
  Tensor x = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(x * x).backward();
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * v; }), 1e-15));
  sum_all(exp(x)).backward();  // a second graph over the same leaf: its gradient adds
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * v + std::exp(v); }), 1e-14));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum_all(x * 3.0).backward();
  EXPECT_TRUE(all_equal(x.grad(), Tensor::full({5}, 3.0, DType::F64)));
}

TEST(AutogradTest, GradientsReturnsWithoutTouchingLeafGrads) {
  Generator gen = test_generator();
  Tensor x = random_tensor({6}, DType::F64, kCPU, gen).requires_grad_();
  Tensor w = random_tensor({6}, DType::F64, kCPU, gen).requires_grad_();
  Tensor r = random_tensor({6}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(x * 5.0).backward();  // a .grad() that gradients() must leave alone
  const Tensor before = fresh_copy(x.grad(), DType::F64, kCPU);
  Tensor upstream = random_tensor({6}, DType::F64, kCPU, gen);
  // y = x·x + x·w + r: dy/dx = 2x + w, dy/dw = x, and r's gradient is the upstream one itself.
  const Tensor y = x * x + x * w + r;
  const std::vector<Tensor> g = gradients(y, upstream, {x, w, r});
  ASSERT_EQ(g.size(), 3u);
  const std::vector<double> vx = x.to_vector(), vw = w.to_vector(), vu = upstream.to_vector();
  std::vector<double> dx(6), dw(6);
  for (size_t i = 0; i < 6; ++i) {
    dx[i] = vu[i] * (2 * vx[i] + vw[i]);
    dw[i] = vu[i] * vx[i];
  }
  EXPECT_TRUE(all_close(g[0], Tensor::from_vector(dx, {6}, DType::F64), 1e-14));
  EXPECT_TRUE(all_close(g[1], Tensor::from_vector(dw, {6}, DType::F64), 1e-14));
  EXPECT_EQ(g[2].data_ptr(), upstream.data_ptr());  // passed through, not copied
  EXPECT_TRUE(all_equal(x.grad(), before));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(r.grad().defined());
  // A leaf the root does not depend on gets an undefined gradient; a non-leaf is refused.
  Tensor unused = random_tensor({6}, DType::F64, kCPU, gen).requires_grad_();
  EXPECT_FALSE(gradients(sum_all(x * x), Tensor(), {unused}).at(0).defined());
  const Tensor h = x * 2.0;
  EXPECT_FT_ERROR(gradients(sum_all(h), Tensor(), {h}), "must be a leaf");
}

TEST(AutogradTest, BackwardTwiceWithoutRetainGraphThrows) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = sum_all(exp(x) * x);
  y.backward();
  EXPECT_THROW(y.backward(), Error);
  EXPECT_TRUE(error_mentions([&] { y.backward(); }, "retain_graph"));
}

TEST(AutogradTest, RetainGraphAllowsASecondBackward) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = sum_all(exp(x) * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  // Two passes over the same graph: twice d/dx (x e^x) = 2 (1 + x) e^x.
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 2 * (1 + v) * std::exp(v); }), 1e-14));
}

TEST(AutogradTest, NoGradGuardRecordsNothingAndRestores) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3}, DType::F64, kCPU, gen).requires_grad_();
  EXPECT_TRUE(grad_mode_enabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_mode_enabled());
    const Tensor y = exp(x) * x + 1.0;
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(y.requires_grad());
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_mode_enabled());
    }
    EXPECT_FALSE(grad_mode_enabled());  // the nested guard restores "off", not "on"
  }
  EXPECT_TRUE(grad_mode_enabled());
  const Tensor z = exp(x);
  EXPECT_NE(z.grad_fn(), nullptr);
  EXPECT_TRUE(z.requires_grad());
}

TEST(AutogradTest, OnlyFloatingLeavesCanRequireGrad) {
  Tensor ids = Tensor::arange(4, DType::I64);
  EXPECT_THROW(ids.requires_grad_(), Error);
  EXPECT_TRUE(error_mentions([&] { ids.requires_grad_(); }, "requires_grad"));
  Tensor i32 = Tensor::arange(4, DType::I32);
  EXPECT_THROW(i32.requires_grad_(), Error);
  Tensor mask = Tensor::zeros({4}, DType::U8);
  EXPECT_THROW(mask.requires_grad_(), Error);
  EXPECT_FALSE(ids.requires_grad());
  EXPECT_NO_THROW(ids.requires_grad_(false));
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    Tensor t = Tensor::zeros({2}, dtype);
    EXPECT_NO_THROW(t.requires_grad_());
    EXPECT_TRUE(t.requires_grad());
  }
}

TEST(AutogradTest, NonLeafCannotChangeRequiresGrad) {
  Tensor x = Tensor::zeros({2}, DType::F64).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_THROW(y.requires_grad_(false), Error);
}

TEST(AutogradTest, NothingRecordedWithoutAGradientInput) {
  Generator gen = test_generator();
  const Tensor a = random_tensor({3}, DType::F64, kCPU, gen), b = random_tensor({3}, DType::F64, kCPU, gen);
  const Tensor y = a * b + exp(a);
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(sum_all(y).backward(), Error);
}

TEST(AutogradTest, NonScalarBackwardNeedsAGradientOfItsShape) {
  Generator gen = test_generator();
  Tensor x = random_tensor({2, 3}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), Error);
  EXPECT_THROW(y.backward(Tensor::full({3, 2}, 1.0, DType::F64)), Error);  // transposed shape
  y.backward(Tensor::full({2, 3}, 1.0, DType::F64));
  EXPECT_TRUE(all_equal(x.grad(), Tensor::full({2, 3}, 2.0, DType::F64)));
}

TEST(AutogradTest, DetachCutsHistoryButSharesValues) {
  Generator gen = test_generator();
  Tensor x = random_tensor({3}, DType::F64, kCPU, gen).requires_grad_();
  const Tensor y = exp(x);
  const Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_TRUE(d.shares_storage(y));
  sum_all(y * d).backward();  // d is a constant: d/dx (e^x · c) = c e^x = e^2x
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return std::exp(2 * v); }), 1e-14));
}

TEST(AutogradTest, LeafBackwardAndGradDTypeFollowTheLeaf) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::F32).requires_grad_();
  x.backward(Tensor::from_vector({3, 4}, {2}, DType::F32));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, 4}));
  // A gradient reaching a bf16 leaf through a cast arrives in bf16.
  Tensor w = Tensor::from_vector({1, 2}, {2}, DType::BF16).requires_grad_();
  sum_all(cast(w, DType::F32) * 0.5).backward();
  EXPECT_EQ(w.grad().dtype(), DType::BF16);
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{0.5, 0.5}));
}

// The leaf's gradient must own its storage: a later in-place write to the upstream gradient
// (or accumulation into it) must not change it.
TEST(AutogradTest, LeafGradientDoesNotAliasTheUpstreamGradient) {
  Tensor x = Tensor::zeros({3}, DType::F64).requires_grad_();
  const Tensor g = Tensor::from_vector({1, 2, 3}, {3}, DType::F64);
  reshape(x, {3}).backward(g);
  g.copy_(Tensor::full({3}, 9.0, DType::F64));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1, 2, 3}));
}

/// 2·h as an op whose backward adds h's pending gradient itself; counts the calls that got one
/// and, when given `completes`, notes completes_input_gradient(0).
Tensor doubled_adding(const Tensor& h, int& pending_seen, std::vector<bool>* completes = nullptr) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = h * 2.0;
  }
  return record_adding("doubled", out, {h}, [&pending_seen, completes](const Tensor& g, const Tensor& pending) {
    if (pending.defined()) ++pending_seen;
    if (completes) completes->push_back(completes_input_gradient(0));
    return std::vector<Tensor>{pending.defined() ? g * 2.0 + pending : g * 2.0};
  });
}

TEST(AutogradTest, AddingBackwardTakesOverThePendingGradient) {
  Generator gen = test_generator();
  Tensor x = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  int pending_seen = 0;
  // h = 3x reaches the loss through the product (whose backward runs first and leaves h a
  // gradient) and through the op: loss = Σ 2h·h, so dh = 4h and dx = 36x.
  const Tensor h = x * 3.0;
  sum_all(doubled_adding(h, pending_seen) * h).backward();
  EXPECT_EQ(pending_seen, 1);
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return 36 * v; }), 1e-14));
  // With no other use there is nothing pending: dx = 2·3.
  Tensor z = random_tensor({5}, DType::F64, kCPU, gen).requires_grad_();
  sum_all(doubled_adding(z * 3.0, pending_seen)).backward();
  EXPECT_EQ(pending_seen, 1);
  EXPECT_TRUE(all_equal(z.grad(), Tensor::full({5}, 6.0, DType::F64)));
}

/// 2·h as an op whose backward notes whether it completes h's gradient.
Tensor doubled_noting(const Tensor& h, std::vector<bool>& completes) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = h * 2.0;
  }
  return record("noting", out, {h}, [&completes](const Tensor& g) {
    completes.push_back(completes_input_gradient(0));
    return std::vector<Tensor>{g * 2.0};
  });
}

// completes_input_gradient: true for the one user of a non-leaf input, and for an adding node
// (which took over what an earlier user left); false for either of two plain users (the second
// finds the first's gradient waiting, which autograd will add), for a leaf input, outside
// backward, and in ft::gradients (which offers no targets).
TEST(AutogradTest, CompletesInputGradientOnlyForTheLastUserToRun) {
  Generator gen = test_generator();
  Tensor x = random_tensor({4}, DType::F64, kCPU, gen).requires_grad_();
  EXPECT_FALSE(completes_input_gradient(0));
  std::vector<bool> completes;
  sum_all(doubled_noting(x * 3.0, completes)).backward();
  EXPECT_EQ(completes, std::vector<bool>{true});
  completes.clear();
  const Tensor h = x * 3.0;  // two users: the one recorded last runs first
  sum_all(doubled_noting(h, completes) + doubled_noting(h, completes)).backward();
  EXPECT_EQ(completes, (std::vector<bool>{false, false}));
  completes.clear();
  // An adding node whose input's other user ran first: it takes the waiting gradient over.
  const Tensor k = x * 3.0;
  int pending_seen = 0;
  sum_all(doubled_noting(doubled_adding(k, pending_seen, &completes) * k, completes)).backward();
  EXPECT_EQ(pending_seen, 1);
  ASSERT_EQ(completes.size(), 2u);
  EXPECT_TRUE(completes[1]) << "the adding node took the waiting gradient over";
  completes.clear();
  sum_all(doubled_noting(x, completes)).backward();  // a leaf
  EXPECT_EQ(completes, std::vector<bool>{false});
  completes.clear();
  gradients(sum_all(doubled_noting(x * 3.0, completes)), Tensor(), {x});
  EXPECT_EQ(completes, std::vector<bool>{false});
  EXPECT_TRUE(x.grad().defined());  // the backwards above reached x
}

TEST(AutogradTest, DeviceMovesKeepTheGraph) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  Tensor x = random_tensor({5}, DType::F32, kCPU, gen).requires_grad_();
  sum_all(exp(x.to(kCUDA))).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), kCPU);
  EXPECT_TRUE(all_close(x.grad(), map_values(x, [](double v) { return std::exp(v); }), 1e-6));
}

TEST(KernelModeTest, GuardRestoresThePreviousMode) {
  const KernelMode initial = kernel_mode();
  {
    KernelModeGuard outer(KernelMode::Unfused);
    EXPECT_EQ(kernel_mode(), KernelMode::Unfused);
    {
      KernelModeGuard inner(KernelMode::Fused);
      EXPECT_EQ(kernel_mode(), KernelMode::Fused);
    }
    EXPECT_EQ(kernel_mode(), KernelMode::Unfused);
  }
  EXPECT_EQ(kernel_mode(), initial);
  set_kernel_mode(KernelMode::Fused);
  {
    KernelModeGuard guard(KernelMode::Unfused);
  }
  EXPECT_EQ(kernel_mode(), KernelMode::Fused);
  set_kernel_mode(initial);
}

TEST(KernelModeTest, ParseAcceptsTheTwoNamesAndRejectsOthers) {
  EXPECT_EQ(parse_kernel_mode("fused"), KernelMode::Fused);
  EXPECT_EQ(parse_kernel_mode("unfused"), KernelMode::Unfused);
  EXPECT_EQ(parse_kernel_mode(kernel_mode_name(KernelMode::Unfused)), KernelMode::Unfused);
  EXPECT_EQ(parse_kernel_mode(kernel_mode_name(KernelMode::Fused)), KernelMode::Fused);
  for (const char* bad : {"", "Fused", "FUSED", "fast", "fused ", "none"}) {
    EXPECT_THROW(parse_kernel_mode(bad), Error) << "'" << bad << "'";
    EXPECT_TRUE(error_mentions([&] { parse_kernel_mode(bad); }, "kernel mode")) << "'" << bad << "'";
  }
}

TEST(KernelModeTest, UseFusedOnlyForCudaInFusedMode) {
  const Tensor cpu = Tensor::zeros({2});
  {
    KernelModeGuard guard(KernelMode::Fused);
    EXPECT_FALSE(use_fused(cpu));
  }
  if (!cuda_available()) return;
  const Tensor gpu = Tensor::zeros({2}, DType::F32, kCUDA);
  {
    KernelModeGuard guard(KernelMode::Fused);
    EXPECT_TRUE(use_fused(gpu));
  }
  {
    KernelModeGuard guard(KernelMode::Unfused);
    EXPECT_FALSE(use_fused(gpu));
  }
}

}  // namespace
}  // namespace ft
