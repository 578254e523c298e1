// Dropout and bias_dropout_add with their Philox offset held in a tensor (PhiloxCounter), fused
// on CUDA and composite elsewhere.
//
// The contract (lib/ops/dropout/dropout.h): element i is kept when philox::dropout_uniform(seed, offset, i) >= p
// in f32, and only (seed, offset, i) decides it. So the mask must be bit for bit the same in the
// fused kernel, the twin on CUDA and the CPU; for tensors of any size or shape (launch
// configurations differ, the shared elements must not); and for an offset advanced by k against
// the same draw shifted by k. Values, gradients (dx, dbias, dresidual) and the edge
// probabilities (p = 0, p = 1, p = 0.999) are checked against the CPU f64 reference.
// Dimension letters: N rows, C columns.
#include <cmath>
#include <string>
#include <vector>

#include "lib/ops/dropout/dropout.h"
#include "lib/ops/random/random.h"
#include "lib/philox.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

/// 1 where dropout kept the element: the result is nonzero wherever the input is.
Tensor mask_of(const Tensor& y) { return ne(y, scalar_like(y, 0.0)); }

/// The mask the header promises, from the host Philox (u8, of `shape`).
Tensor contract_mask(const Shape& shape, double p, uint64_t seed, uint64_t offset) {
  std::vector<double> m(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < m.size(); ++i)
    m[i] = philox::dropout_uniform(seed, offset, i) >= static_cast<float>(p) ? 1.0 : 0.0;
  return Tensor::from_vector(m, shape, DType::U8);
}

/// Counter values for every test: 0, a multiple of 4 but not of 8 (a pack of 8 then starts
/// mid-way through a Philox block: the kernels' general path), one past 32 bits, and a multiple
/// of 8 whose Philox block number is past 32 bits (the block counter's high word).
const uint64_t kOffsets[] = {0, 12, (uint64_t{1} << 33) + 4, (uint64_t{1} << 36) + 8};

// ---- philox_offset and the tensor-offset philox_uniform

class PhiloxOffsetTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FT_SKIP_UNLESS_AVAILABLE(GetParam()); }
  Device device() const { return GetParam(); }
};

TEST_P(PhiloxOffsetTest, OffsetIsOneI64ElementOnTheDevice) {
  for (uint64_t value : {uint64_t{0}, uint64_t{12}, (uint64_t{1} << 40) + 4}) {
    const Tensor o = philox_offset(value, device());
    EXPECT_EQ(o.dtype(), DType::I64);
    EXPECT_EQ(o.numel(), 1);
    EXPECT_EQ(o.device(), device());
    EXPECT_EQ(static_cast<uint64_t>(o.item()), value);
  }
}

TEST_P(PhiloxOffsetTest, TensorOffsetMatchesHostOffset) {
  const uint64_t seed = test_seed();
  for (int64_t n : {1, 3, 4099}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{4}, uint64_t{7}, (uint64_t{1} << 33) + 4}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      for (UniformDraw draw : {UniformDraw::Word, UniformDraw::DropoutHalfWord}) {
        const bool dropout_bits = draw == UniformDraw::DropoutHalfWord;
        SCOPED_TRACE(dropout_bits ? "dropout's half-words" : "words");
        const Tensor u = philox_uniform({n}, seed, philox_offset(offset, device()), draw);
        EXPECT_EQ(u.device(), device());
        EXPECT_EQ(u.dtype(), DType::F32);
        EXPECT_TRUE(all_equal(u, philox_uniform({n}, seed, offset, device(), draw)));
        std::vector<double> expected(static_cast<size_t>(n));
        for (size_t i = 0; i < expected.size(); ++i)
          expected[i] = dropout_bits ? philox::dropout_uniform(seed, offset, i) : philox::uniform(seed, offset, i);
        EXPECT_TRUE(all_equal(u.to(kCPU), Tensor::from_vector(expected, {n}, DType::F32)));
      }
    }
  }
}

TEST_P(PhiloxOffsetTest, OffsetMustBeOneI64Element) {
  EXPECT_FT_ERROR(philox_uniform({4}, 1, Tensor::zeros({1}, DType::I32, device())), "offset");
  EXPECT_FT_ERROR(philox_uniform({4}, 1, Tensor::zeros({2}, DType::I64, device())), "offset");
  EXPECT_FT_ERROR(philox_uniform({4}, 1, Tensor()), "offset");
  const Tensor x = Tensor::zeros({4, 6}, DType::F32, device());
  EXPECT_FT_ERROR(dropout(x, 0.5, 1, Tensor::zeros({1}, DType::F32, device())), "offset");
  EXPECT_FT_ERROR(dropout(x, 0.5, 1, Tensor::zeros({3}, DType::I64, device())), "offset");
}

// ---- PhiloxCounter

// A take starts at the counter rounded up to a multiple of 8 (a value set from elsewhere, such as
// an older checkpoint's multiple of 4, is realigned) and advances by the count rounded up to 8.
TEST_P(PhiloxOffsetTest, CounterTakesWholeBlocksOfEight) {
  PhiloxCounter& counter = PhiloxCounter::on(device());
  EXPECT_EQ(&counter, &PhiloxCounter::on(device()));  // one counter per device
  const uint64_t saved = counter.value();
  counter.set(100);
  EXPECT_EQ(counter.value(), 100u);
  const Tensor first = counter.take(5);
  EXPECT_EQ(first.dtype(), DType::I64);
  EXPECT_EQ(first.numel(), 1);
  EXPECT_EQ(first.device(), device());
  EXPECT_EQ(first.item(), 104.0);      // 100 rounded up to 8
  EXPECT_EQ(counter.value(), 112u);  // and 5 rounded up to 8
  const struct {
    uint64_t count, used, after;
  } steps[] = {{8, 112, 120}, {0, 120, 120}, {1, 120, 128}, {4, 128, 136}, {9, 136, 152}, {4097, 152, 4256}};
  for (const auto& s : steps) {
    const Tensor used = counter.take(s.count);
    EXPECT_EQ(static_cast<uint64_t>(used.item()), s.used) << "take(" << s.count << ")";
    EXPECT_EQ(counter.value(), s.after) << "take(" << s.count << ")";
  }
  // Each take returns a tensor of its own: later takes leave it alone.
  EXPECT_EQ(first.item(), 104.0);
  counter.set(saved);
}

TEST_P(PhiloxOffsetTest, TwoTakesGiveDifferentMasks) {
  const uint64_t seed = test_seed();
  PhiloxCounter& counter = PhiloxCounter::on(device());
  const uint64_t saved = counter.value();
  counter.set(4096);
  const int64_t n = 1001;  // not a multiple of 8: the second take starts at 4096 + 1008
  const Tensor x = Tensor::full({n}, 1.0, DType::F32, device());
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    SCOPED_TRACE(kernel_mode_name(mode));
    KernelModeGuard guard(mode);
    const uint64_t base = counter.value();
    const Tensor o1 = counter.take(static_cast<uint64_t>(n)), o2 = counter.take(static_cast<uint64_t>(n));
    const Tensor m1 = mask_of(dropout(x, 0.5, seed, o1)), m2 = mask_of(dropout(x, 0.5, seed, o2));
    EXPECT_TRUE(all_equal(m1, contract_mask({n}, 0.5, seed, base)));
    EXPECT_TRUE(all_equal(m2, contract_mask({n}, 0.5, seed, base + 1008)));
    const std::vector<double> v1 = m1.to_vector(), v2 = m2.to_vector();
    int64_t same = 0;
    for (size_t i = 0; i < v1.size(); ++i) same += v1[i] == v2[i];
    // Independent masks agree on about half the elements (standard error 0.016).
    EXPECT_NEAR(static_cast<double>(same) / static_cast<double>(n), 0.5, 0.08);
  }
  counter.set(saved);
}

INSTANTIATE_TEST_SUITE_P(Devices, PhiloxOffsetTest, ::testing::Values(kCPU, kCUDA),
                         [](const auto& info) { return std::string(info.param.is_cuda() ? "cuda" : "cpu"); });

// ---- the mask: bit-identical everywhere

// The fused kernel (KernelMode::Fused on CUDA), the twin on CUDA (Unfused), the twin called by
// name, the host-offset overload and bias_dropout_add all draw the CPU's mask, bit for bit.
TEST(DropoutMaskTest, FusedTwinAndCpuDrawTheSameMask) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  const double p = 0.3;
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1}, Shape{3}, Shape{33, 129}, Shape{100003}, Shape{4, 8192}}) {
      for (uint64_t offset : kOffsets) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << shape_str(shape) << " offset " << offset);
        const Tensor x = positive_tensor(shape, dtype, kCPU, gen);  // no zeros: y == 0 exactly where dropped
        const Tensor x_gpu = x.to(kCUDA);
        const Tensor expected = contract_mask(shape, p, seed, offset);
        const Tensor cpu = dropout(x, p, seed, philox_offset(offset, kCPU));
        EXPECT_TRUE(all_equal(mask_of(cpu), expected)) << "cpu";
        Tensor results[2];
        for (int fused = 0; fused < 2; ++fused) {
          KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
          const char* mode = fused ? "fused" : "unfused";
          results[fused] = dropout(x_gpu, p, seed, philox_offset(offset, kCUDA));
          EXPECT_TRUE(results[fused].is_cuda());
          EXPECT_TRUE(all_equal(mask_of(results[fused]), expected)) << mode;
          EXPECT_TRUE(all_equal(mask_of(dropout(x_gpu, p, seed, offset)), expected)) << mode << ", host offset";
          EXPECT_TRUE(all_equal(mask_of(dropout_composite(x_gpu, p, seed, philox_offset(offset, kCUDA))), expected))
              << mode << ", dropout_composite";
          const Tensor zero_residual = Tensor::zeros(shape, dtype, kCUDA);
          const Tensor zero_bias = Tensor::zeros({shape.back()}, dtype, kCUDA);
          EXPECT_TRUE(all_equal(
              mask_of(bias_dropout_add(x_gpu, zero_bias, zero_residual, p, seed, philox_offset(offset, kCUDA))),
              expected))
              << mode << ", bias_dropout_add";
          EXPECT_TRUE(all_close(results[fused], cpu, forward_tolerance(dtype))) << mode << " values";
        }
      }
    }
  }
}

class DropoutFusedDeviceTest : public DeviceModeTest {};

// Launch configurations differ with the tensor's size and shape (grid, tail, vector width); the
// elements the tensors share must not. Offsets advanced by a multiple of 4 (the counter hands out
// multiples of 8) shift the draw, whatever shape the shifted tensor has.
TEST_P(DropoutFusedDeviceTest, MaskDoesNotDependOnLaunchConfiguration) {
  const uint64_t seed = test_seed();
  const uint64_t base = 8;
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t big = (1 << 20) + 3;
    const Tensor reference =
        mask_of(dropout(Tensor::full({big}, 1.0, dtype, device()), 0.5, seed, philox_offset(base, device())));
    EXPECT_TRUE(all_equal(reference, contract_mask({big}, 0.5, seed, base)));
    for (int64_t n : {1, 3, 4, 5, 1000, 4099, 65537}) {
      const Tensor m =
          mask_of(dropout(Tensor::full({n}, 1.0, dtype, device()), 0.5, seed, philox_offset(base, device())));
      EXPECT_TRUE(all_equal(m, reference.narrow(0, 0, n))) << "prefix of " << n;
    }
    // The same numel in different shapes: the same mask in row-major order.
    for (const Shape& shape : {Shape{64, 64}, Shape{2, 2048}, Shape{4096, 1}, Shape{1, 4096}, Shape{8, 8, 64}}) {
      const Tensor m =
          mask_of(dropout(Tensor::full(shape, 1.0, dtype, device()), 0.5, seed, philox_offset(base, device())));
      EXPECT_TRUE(all_equal(m.reshape({4096}), reference.narrow(0, 0, 4096))) << shape_str(shape);
    }
    // Offset base + k on a tensor of another shape with the same numel: elements k.. of the
    // base draw.
    for (int64_t k : {4, 64, 4096}) {
      const Tensor m = mask_of(dropout(Tensor::full({64, 64}, 1.0, dtype, device()), 0.5, seed,
                                       philox_offset(base + static_cast<uint64_t>(k), device())));
      EXPECT_TRUE(all_equal(m.reshape({4096}), reference.narrow(0, k, 4096))) << "offset +" << k;
    }
  }
}

// The header allows any offset, not only the counter's multiples of 8: a draw at an unaligned
// offset starts mid-way through a Philox block.
TEST_P(DropoutFusedDeviceTest, UnalignedOffsetsFollowTheContract) {
  const uint64_t seed = test_seed();
  for (DType dtype : fused_dtypes()) {
    for (uint64_t offset : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{6}, (uint64_t{1} << 32) + 3}) {
      for (int64_t n : {1, 5, 4099}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " offset " << offset << " n " << n);
        const Tensor y = dropout(Tensor::full({n}, 1.0, dtype, device()), 0.4, seed, philox_offset(offset, device()));
        EXPECT_TRUE(all_equal(mask_of(y), contract_mask({n}, 0.4, seed, offset)));
      }
    }
  }
}

// ---- p = 0, p = 1, p close to 1

TEST_P(DropoutFusedDeviceTest, ZeroProbabilityReturnsTheInputExactly) {
  Generator gen = test_generator();
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = fresh_leaf(random_tensor({37, 767}, DType::F64, kCPU, gen), dtype, device());
    const Tensor y = dropout(x, 0.0, 1, philox_offset(0, device()));
    EXPECT_TRUE(all_equal(y, x));
    const Tensor dy = random_tensor({37, 767}, dtype, device(), gen);
    y.backward(dy);
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(all_equal(x.grad(), dy));
  }
}

TEST_P(DropoutFusedDeviceTest, ProbabilityOneGivesZerosAndZeroGradients) {
  Generator gen = test_generator();
  const Shape shape{37, 767};
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = fresh_leaf(random_tensor(shape, DType::F64, kCPU, gen), dtype, device());
    const Tensor y = dropout(x, 1.0, 1, philox_offset(0, device()));
    EXPECT_TRUE(all_equal(y, Tensor::zeros(shape, dtype)));  // zeros, not 0 · inf = NaN
    y.backward(random_tensor(shape, dtype, device(), gen));
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(all_equal(x.grad(), Tensor::zeros(shape, dtype)));

    // bias_dropout_add drops all of x + bias and leaves the residual.
    Tensor x2 = fresh_leaf(x, dtype, device());
    Tensor b = fresh_leaf(random_tensor({767}, DType::F64, kCPU, gen), dtype, device());
    Tensor r = fresh_leaf(random_tensor(shape, DType::F64, kCPU, gen), dtype, device());
    const Tensor z = bias_dropout_add(x2, b, r, 1.0, 1, philox_offset(0, device()));
    EXPECT_TRUE(all_equal(z, r));
    const Tensor dz = random_tensor(shape, dtype, device(), gen);
    z.backward(dz);
    EXPECT_TRUE(all_equal(r.grad(), dz));
    EXPECT_TRUE(all_equal(x2.grad(), Tensor::zeros(shape, dtype)));
    EXPECT_TRUE(all_equal(b.grad(), Tensor::zeros({767}, dtype)));
  }
}

// p = 0.999: about one element in a thousand survives, scaled by 1/(1 − p) = 1000.
TEST_P(DropoutFusedDeviceTest, NearOneProbabilityKeepsFewScaledBy1000) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed(), offset = 40;
  const double p = 0.999;
  const Shape shape{200003};
  for (DType dtype : fused_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x_master = positive_tensor(shape, DType::F64, kCPU, gen);
    Tensor x = fresh_leaf(x_master, dtype, device());
    const Tensor y = dropout(x, p, seed, philox_offset(offset, device()));
    const Tensor expected_mask = contract_mask(shape, p, seed, offset);
    EXPECT_TRUE(all_equal(mask_of(y), expected_mask));
    const std::vector<double> m = expected_mask.to_vector(), vx = x.to_vector();
    double kept = 0.0;
    std::vector<double> expected(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      kept += m[i];
      expected[i] = m[i] * vx[i] * 1000.0;
    }
    // 200003 draws at 0.001: mean 200, standard deviation 14.
    EXPECT_GT(kept, 120.0);
    EXPECT_LT(kept, 280.0);
    EXPECT_TRUE(all_close(y, Tensor::from_vector(expected, shape, DType::F64), forward_tolerance(dtype)));
    const Tensor dy = random_tensor(shape, dtype, device(), gen);
    y.backward(dy);
    const std::vector<double> vdy = dy.to_vector();
    for (size_t i = 0; i < m.size(); ++i) expected[i] = m[i] * vdy[i] * 1000.0;
    EXPECT_TRUE(all_close(x.grad(), Tensor::from_vector(expected, shape, DType::F64), forward_tolerance(dtype)));
  }
}

// ---- bias_dropout_add's gradients

// residual + dropout(x + bias): the residual's gradient is dy itself, x's is dy through the
// mask, and the bias's is the column sums of x's.
TEST_P(DropoutFusedDeviceTest, BiasDropoutAddGradients) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  const double p = 0.3;
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{2, 5, 64}, Shape{4, 8192}}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << shape_str(shape)
                                        << (with_bias ? "" : " no bias"));
        const int64_t c = shape.back();
        Tensor x = fresh_leaf(random_tensor(shape, DType::F64, kCPU, gen), dtype, device());
        Tensor r = fresh_leaf(random_tensor(shape, DType::F64, kCPU, gen), dtype, device());
        Tensor b = with_bias ? fresh_leaf(random_tensor({c}, DType::F64, kCPU, gen), dtype, device()) : Tensor();
        const uint64_t offset = 4 * 1001;
        const Tensor y = bias_dropout_add(x, b, r, p, seed, philox_offset(offset, device()));
        ASSERT_EQ(y.shape(), shape);
        EXPECT_EQ(y.dtype(), dtype);
        const Tensor dy = random_tensor(shape, dtype, device(), gen);
        y.backward(dy);
        ASSERT_TRUE(r.grad().defined());
        EXPECT_TRUE(all_equal(r.grad(), dy)) << "dresidual is dy";
        ASSERT_TRUE(x.grad().defined());
        EXPECT_TRUE(all_equal(mask_of(x.grad()), contract_mask(shape, p, seed, offset))) << "dx's mask";
        EXPECT_TRUE(
            all_close(x.grad(), dropout(dy, p, seed, philox_offset(offset, device())), forward_tolerance(dtype)))
            << "dx = dropout(dy)";
        if (!with_bias) continue;
        ASSERT_TRUE(b.grad().defined());
        EXPECT_EQ(b.grad().dtype(), dtype);
        // dbias sums the unrounded dx; the sums here add the rounded one: u · Σ|dx| apart.
        const Tensor abs_dx = Tensor::from_vector(
            [&] {
              std::vector<double> v = x.grad().to_vector();
              for (double& a : v) a = std::abs(a);
              return v;
            }(),
            shape, DType::F64);
        EXPECT_TRUE(all_close(b.grad(), Tensor::from_vector(column_sums(x.grad()), {c}, DType::F64),
                              grad_tolerance(dtype), unit_roundoff(dtype) * norm_of(column_sums(abs_dx))))
            << "dbias = column sums of dx";
      }
    }
  }
}

// ---- against the CPU f64 reference

TEST_P(DropoutFusedDeviceTest, MatchesF64Reference) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{2, 5, 64}, Shape{4, 8192}}) {
      for (double p : {0.0, 0.1, 0.5}) {
        for (uint64_t offset : kOffsets) {
          SCOPED_TRACE(testing::Message()
                       << dtype_name(dtype) << " " << shape_str(shape) << " p " << p << " offset " << offset);
          const Tensor x = random_tensor(shape, DType::F64, kCPU, gen);
          EXPECT_TRUE(matches_f64_reference(
              [&](const std::vector<Tensor>& in) {
                return dropout(in[0], p, seed, philox_offset(offset, in[0].device()));
              },
              {x}, device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype)))
              << "dropout";
          for (bool with_bias : {true, false}) {
            const Tensor b = with_bias ? random_tensor({shape.back()}, DType::F64, kCPU, gen) : Tensor();
            EXPECT_TRUE(matches_f64_reference(
                [&](const std::vector<Tensor>& in) {
                  return bias_dropout_add(in[0], in[1], in[2], p, seed, philox_offset(offset, in[0].device()));
                },
                {x, b, random_tensor(shape, DType::F64, kCPU, gen)}, device(), dtype, gen, forward_tolerance(dtype),
                grad_tolerance(dtype)))
                << "bias_dropout_add" << (with_bias ? "" : " without bias");
          }
        }
      }
    }
  }
}

// Frozen bias or residual (no gradient asked): the fused backward skips them.
TEST_P(DropoutFusedDeviceTest, BiasDropoutAddPartialGradientsMatchF64Reference) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  const Shape shape{37, 767};
  for (DType dtype : fused_dtypes()) {
    for (const std::vector<bool>& wrt : {std::vector<bool>{true, false, false}, std::vector<bool>{false, true, false},
                                         std::vector<bool>{false, false, true}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " wrt " << wrt[0] << wrt[1] << wrt[2]);
      EXPECT_TRUE(matches_f64_reference(
          [&](const std::vector<Tensor>& in) {
            return bias_dropout_add(in[0], in[1], in[2], 0.2, seed, philox_offset(36, in[0].device()));
          },
          {random_tensor(shape, DType::F64, kCPU, gen), random_tensor({767}, DType::F64, kCPU, gen),
           random_tensor(shape, DType::F64, kCPU, gen)},
          device(), dtype, gen, forward_tolerance(dtype), grad_tolerance(dtype), wrt));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DropoutFusedDeviceTest, ::testing::ValuesIn(device_modes()),
                         [](const auto& info) { return device_mode_name(info.param); });

// ---- the CPU twin, gradient checks, contracts

TEST(DropoutFusedTest, CpuIsTheCompositeTwinInBothModes) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  const Tensor x = random_tensor({37, 65}, DType::F64, kCPU, gen);
  const Tensor b = random_tensor({65}, DType::F64, kCPU, gen), r = random_tensor({37, 65}, DType::F64, kCPU, gen);
  for (KernelMode mode : {KernelMode::Fused, KernelMode::Unfused}) {
    KernelModeGuard guard(mode);
    const Tensor o = philox_offset(20, kCPU);
    EXPECT_TRUE(all_equal(dropout(x, 0.3, seed, o), dropout_composite(x, 0.3, seed, o))) << kernel_mode_name(mode);
    EXPECT_TRUE(all_equal(dropout(x, 0.3, seed, o), dropout(x, 0.3, seed, uint64_t{20}))) << kernel_mode_name(mode);
    EXPECT_TRUE(all_equal(bias_dropout_add(x, b, r, 0.3, seed, o), bias_dropout_add_composite(x, b, r, 0.3, seed, o)))
        << kernel_mode_name(mode);
    EXPECT_TRUE(all_close(bias_dropout_add(x, b, r, 0.3, seed, o), r + dropout(x + b, 0.3, seed, o), 1e-15))
        << kernel_mode_name(mode);
  }
}

TEST(DropoutFusedTest, GradCheckF64Composites) {
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (double p : {0.3, 0.75}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return dropout_composite(in[0], p, seed, philox_offset(8, kCPU)); },
        {random_tensor({5, 7}, DType::F64, kCPU, gen)}, gen));
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return bias_dropout_add_composite(in[0], in[1], in[2], p, seed, philox_offset(8, kCPU));
        },
        {random_tensor({5, 7}, DType::F64, kCPU, gen), random_tensor({7}, DType::F64, kCPU, gen),
         random_tensor({5, 7}, DType::F64, kCPU, gen)},
        gen));
  }
}

TEST(DropoutFusedTest, Contracts) {
  const Tensor x = Tensor::zeros({4, 6});
  const Tensor o = philox_offset(0, kCPU);
  EXPECT_FT_ERROR(dropout(x, 1.5, 0, o), "dropout");
  EXPECT_FT_ERROR(dropout(x, -0.1, 0, o), "dropout");
  EXPECT_FT_ERROR(bias_dropout_add(x, Tensor::zeros({6}), x, 1.5, 0, o), "dropout");
  EXPECT_FT_ERROR(bias_dropout_add(x, Tensor::zeros({5}), x, 0.5, 0, o), "bias_dropout_add");
  EXPECT_FT_ERROR(bias_dropout_add(x, Tensor::zeros({6}), Tensor::zeros({4, 5}), 0.5, 0, o), "bias_dropout_add");
  EXPECT_NO_THROW(bias_dropout_add(x, Tensor(), x, 0.5, 0, o));
  // An undefined residual is accepted (dropout itself is bias_dropout_add without bias and
  // residual): the result is dropout(x + bias).
  const Tensor ones = Tensor::full({4, 6}, 1.0), bias = Tensor::full({6}, 0.5);
  EXPECT_TRUE(all_equal(bias_dropout_add(ones, bias, Tensor(), 0.5, 7, o), dropout(ones + bias, 0.5, 7, o)));
}

// ---- the fused CUDA path against its twin

TEST(DropoutFusedVsTwinTest, AgreeOnCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  const uint64_t seed = test_seed();
  for (DType dtype : fused_dtypes()) {
    for (const Shape& shape : {Shape{1, 767}, Shape{37, 767}, Shape{4, 8192}}) {
      for (double p : {0.0, 0.1, 0.5}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << shape_str(shape) << " p " << p);
        EXPECT_TRUE(fused_matches_twin(
            [&](const std::vector<Tensor>& in) { return dropout(in[0], p, seed, philox_offset(12, in[0].device())); },
            {random_tensor(shape, DType::F64, kCPU, gen)}, dtype, gen, grad_tolerance(dtype)));
        EXPECT_TRUE(fused_matches_twin(
            [&](const std::vector<Tensor>& in) {
              return bias_dropout_add(in[0], in[1], in[2], p, seed, philox_offset(12, in[0].device()));
            },
            {random_tensor(shape, DType::F64, kCPU, gen), random_tensor({shape.back()}, DType::F64, kCPU, gen),
             random_tensor(shape, DType::F64, kCPU, gen)},
            dtype, gen, grad_tolerance(dtype)));
      }
    }
  }
}

TEST(DropoutFusedVsTwinTest, FusedModeRecordsFewerNodesOnCudaOnly) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({37, 65}, DType::F64, kCPU, gen), b = random_tensor({65}, DType::F64, kCPU, gen);
  for (Device device : {kCPU, kCUDA}) {
    if (device.is_cuda() && !cuda_available()) continue;
    const Tensor xl = fresh_leaf(x, DType::F32, device), bl = fresh_leaf(b, DType::F32, device),
                 rl = fresh_leaf(x, DType::F32, device);
    size_t sizes[2][2];
    for (int fused = 0; fused < 2; ++fused) {
      KernelModeGuard guard(fused ? KernelMode::Fused : KernelMode::Unfused);
      sizes[fused][0] = graph_size(dropout(xl, 0.5, 1, philox_offset(0, device)));
      sizes[fused][1] = graph_size(bias_dropout_add(xl, bl, rl, 0.5, 1, philox_offset(0, device)));
    }
    for (int op = 0; op < 2; ++op) {
      SCOPED_TRACE(std::string(device.str()) + (op ? " bias_dropout_add" : " dropout"));
      EXPECT_GT(sizes[1][op], 0u);
      if (device.is_cuda())
        EXPECT_LT(sizes[1][op], sizes[0][op]);
      else
        EXPECT_EQ(sizes[1][op], sizes[0][op]);
    }
  }
}

}  // namespace
}  // namespace ft
