// Tensor itself: creation (zeros, full, arange, from_vector, rand, randn), properties, device
// and dtype conversion, item and str, views (which ops share storage), copy_ and assign_.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "lib/ops/random.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

const std::vector<DType> kAllDTypes = {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8};

/// The devices this machine has: the CPU, and CUDA when a GPU is visible.
std::vector<Device> available_devices() {
  std::vector<Device> devices = {kCPU};
  if (cuda_available()) devices.push_back(kCUDA);
  return devices;
}

TEST(TensorTest, ZerosFullAndArange) {
  for (Device device : available_devices()) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(device.str() + " " + dtype_name(dtype));
      const Tensor z = Tensor::zeros({3, 33}, dtype, device);
      EXPECT_EQ(z.shape(), (Shape{3, 33}));
      EXPECT_EQ(z.dtype(), dtype);
      EXPECT_EQ(z.device(), device);
      EXPECT_EQ(z.to_vector(), std::vector<double>(99, 0.0));
      EXPECT_EQ(Tensor::full({2, 2}, 7.0, dtype, device).to_vector(), std::vector<double>(4, 7.0));
      const std::vector<double> a = Tensor::arange(129, dtype, device).to_vector();
      ASSERT_EQ(a.size(), 129u);
      // bf16 holds integers exactly only up to 256 and u8 up to 255: 0..128 fit everywhere.
      for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], static_cast<double>(i)) << i;
    }
  }
  EXPECT_EQ(Tensor::arange(5).dtype(), DType::I64);  // the default dtype of ids
  EXPECT_EQ(Tensor::zeros({2}).dtype(), DType::F32);
  EXPECT_EQ(Tensor::zeros({2}).device(), kCPU);
}

TEST(TensorTest, FromVectorConvertsToTheDType) {
  const std::vector<double> v = {1.0, -2.5, 3.25, 0.0, 100.0, 1.0 / 3.0};
  EXPECT_EQ(Tensor::from_vector(v, {2, 3}, DType::F64).to_vector(), v);
  const std::vector<double> f32 = Tensor::from_vector(v, {6}, DType::F32).to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(f32[i], static_cast<double>(static_cast<float>(v[i])));
  const std::vector<double> bf = Tensor::from_vector(v, {6}, DType::BF16).to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(bf[i], v[i], std::abs(v[i]) * std::ldexp(1.0, -8));
  EXPECT_EQ(Tensor::from_vector({1, -2, 3}, {3}, DType::I64).to_vector(), (std::vector<double>{1, -2, 3}));
}

TEST(TensorTest, Properties) {
  const Tensor t = Tensor::zeros({2, 3, 5}, DType::BF16);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_FALSE(t.is_cuda());
  const Tensor scalar = Tensor::full({}, 4.0);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.item(), 4.0);
  EXPECT_EQ(Tensor::zeros({3, 0}).numel(), 0);
}

TEST(TensorTest, RandAndRandnAreDeterministicForASeed) {
  const uint64_t seed = test_seed();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    Generator g1(seed), g2(seed), other(seed + 1);
    EXPECT_EQ(Tensor::rand({257}, g1, dtype).to_vector(), Tensor::rand({257}, g2, dtype).to_vector());
    EXPECT_EQ(Tensor::randn({33, 3}, g1, dtype).to_vector(), Tensor::randn({33, 3}, g2, dtype).to_vector());
    EXPECT_NE(Tensor::randn({33, 3}, g1, dtype).to_vector(), Tensor::randn({33, 3}, other, dtype).to_vector());
  }
}

TEST(TensorTest, RandAndRandnMatchBetweenCpuAndCuda) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const uint64_t seed = test_seed();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    for (int64_t n : {1, 33, 4099}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      Generator cpu_gen(seed), cuda_gen(seed);
      const Tensor u_cuda = Tensor::rand({n}, cuda_gen, dtype, kCUDA);
      const Tensor z_cuda = Tensor::randn({n}, cuda_gen, dtype, kCUDA);
      EXPECT_TRUE(u_cuda.is_cuda());
      EXPECT_TRUE(all_equal(u_cuda, Tensor::rand({n}, cpu_gen, dtype, kCPU)));
      EXPECT_TRUE(all_equal(z_cuda, Tensor::randn({n}, cpu_gen, dtype, kCPU)));
      EXPECT_EQ(cpu_gen.offset(), cuda_gen.offset());
    }
  }
}

TEST(TensorTest, RandnHasStandardNormalMoments) {
  Generator gen = test_generator();
  const int64_t n = 200000;
  const std::vector<double> v = Tensor::randn({n}, gen, DType::F64).to_vector();
  double total = 0.0, squares = 0.0;
  int64_t within_one = 0;
  for (double x : v) {
    ASSERT_TRUE(std::isfinite(x));
    total += x;
    squares += x * x;
    within_one += std::abs(x) < 1.0;
  }
  const double mean = total / static_cast<double>(n);
  EXPECT_NEAR(mean, 0.0, 0.01);  // standard error 0.0022
  EXPECT_NEAR(squares / static_cast<double>(n) - mean * mean, 1.0, 0.02);
  EXPECT_NEAR(static_cast<double>(within_one) / static_cast<double>(n), 0.6827, 0.005);
}

TEST(TensorTest, RandIsInUnitInterval) {
  Generator gen = test_generator();
  for (DType dtype : {DType::F32, DType::F64}) {
    for (double x : Tensor::rand({100000}, gen, dtype).to_vector()) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
    }
  }
}

TEST(TensorTest, DeviceRoundTripKeepsEveryValue) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen = test_generator();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor host = is_floating(dtype) ? random_tensor({33, 129}, dtype, kCPU, gen)
                                           : cast(affine(Tensor::rand({33, 129}, gen, DType::F64), 200.0, 0.0), dtype);
    const Tensor device = host.to(kCUDA);
    EXPECT_TRUE(device.is_cuda());
    EXPECT_EQ(device.dtype(), dtype);
    EXPECT_EQ(device.shape(), host.shape());
    const Tensor back = device.to(kCPU);
    EXPECT_FALSE(back.is_cuda());
    EXPECT_EQ(std::memcmp(back.data_ptr(), host.data_ptr(), host.nbytes()), 0);
    EXPECT_TRUE(host.to(kCPU).shares_storage(host));  // a move to the same device is free
  }
}

TEST(TensorTest, ToDTypeConverts) {
  Generator gen = test_generator();
  const Tensor x = random_tensor({5, 7}, DType::F64, kCPU, gen);
  const Tensor f = x.to(DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_TRUE(all_close(f, x, 1e-7));
  EXPECT_TRUE(all_equal(f.to(DType::F64), f));  // f32 -> f64 is exact
  const Tensor b = x.to(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_TRUE(all_close(b, x, std::ldexp(1.0, -8)));
  EXPECT_TRUE(x.to(DType::F64).shares_storage(x));  // same dtype: the same tensor
  EXPECT_EQ(Tensor::from_vector({2.7, -2.7}, {2}, DType::F64).to(DType::I64).to_vector(), (std::vector<double>{2, -2}));
}

TEST(TensorTest, ItemReadsTheSingleElement) {
  for (Device device : available_devices()) {
    EXPECT_EQ(Tensor::full({1}, -3.5, DType::F32, device).item(), -3.5);
    EXPECT_EQ(Tensor::full({1, 1, 1}, 42.0, DType::I64, device).item(), 42.0);
    EXPECT_EQ(Tensor::arange(5, DType::F64, device).narrow(0, 3, 1).item(), 3.0);
  }
}

TEST(TensorTest, StrNamesShapeDTypeAndDevice) {
  Generator gen = test_generator();
  for (Device device : available_devices()) {
    const Tensor t = random_tensor({2, 3}, DType::F32, device, gen);
    std::string s;
    ASSERT_NO_THROW(s = t.str());
    EXPECT_NE(s.find("[2, 3]"), std::string::npos) << s;
    EXPECT_NE(s.find("f32"), std::string::npos) << s;
    EXPECT_NE(s.find(device.str()), std::string::npos) << s;
  }
  // Long dims are elided, scalars, empty and undefined tensors print, and so do integers.
  const std::string long_str = Tensor::arange(1000, DType::I64).reshape({10, 100}).str();
  EXPECT_NE(long_str.find("..."), std::string::npos);
  EXPECT_LT(long_str.size(), 2000u);
  EXPECT_NO_THROW(Tensor::full({}, 1.0).str());
  EXPECT_NO_THROW(Tensor::zeros({0, 3}).str());
  EXPECT_NO_THROW(Tensor::zeros({3, 0}).str());
  EXPECT_NE(Tensor().str().find("undefined"), std::string::npos);
  Tensor g = Tensor::zeros({2}).requires_grad_();
  EXPECT_NE(g.str().find("requires_grad"), std::string::npos);
  std::ostringstream out;
  out << Tensor::zeros({4, 1});
  EXPECT_NE(out.str().find("[4, 1]"), std::string::npos);
}

TEST(TensorTest, NarrowOfLeadingDimIsAView) {
  for (Device device : available_devices()) {
    const Tensor x = Tensor::arange(24, DType::F32, device).reshape({6, 4});
    const Tensor rows = x.narrow(0, 2, 3);
    EXPECT_TRUE(rows.shares_storage(x));
    EXPECT_EQ(rows.to_vector(), (std::vector<double>{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
    EXPECT_FALSE(x.narrow(1, 1, 2).shares_storage(x));  // inner dim: a copy
    EXPECT_TRUE(x.reshape({4, 6}).shares_storage(x));
    EXPECT_FALSE(x.transpose().shares_storage(x));
    EXPECT_TRUE(x.detach().shares_storage(x));
    EXPECT_FALSE(Tensor::zeros({6, 4}).shares_storage(x));
  }
}

TEST(TensorTest, CopyConvertsDTypeAndCrossesDevices) {
  Generator gen = test_generator();
  const Tensor src = random_tensor({3, 5}, DType::F64, kCPU, gen);
  const Tensor dst = Tensor::zeros({3, 5}, DType::F32);
  dst.copy_(src);
  EXPECT_TRUE(all_equal(dst, src.to(DType::F32)));
  EXPECT_FALSE(dst.shares_storage(src));
  // copy_ only needs the same number of elements.
  const Tensor flat = Tensor::zeros({15}, DType::F64);
  flat.copy_(src);
  EXPECT_EQ(flat.to_vector(), src.to_vector());
  if (!cuda_available()) return;
  const Tensor on_gpu = Tensor::zeros({3, 5}, DType::BF16, kCUDA);
  on_gpu.copy_(src);  // CPU f64 into CUDA bf16
  EXPECT_TRUE(all_equal(on_gpu, src.to(DType::BF16)));
  const Tensor back = Tensor::zeros({3, 5}, DType::F64);
  back.copy_(on_gpu);
  EXPECT_TRUE(all_equal(back, src.to(DType::BF16)));
}

TEST(TensorTest, AssignAdoptsTheSourceStorage) {
  Generator gen = test_generator();
  const Tensor a = Tensor::zeros({2, 3});
  const Tensor alias = a;  // the same impl: it sees the assignment too
  const Tensor b = random_tensor({2, 3}, DType::F32, kCPU, gen);
  a.assign_(b);
  EXPECT_TRUE(a.shares_storage(b));
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_EQ(alias.to_vector(), b.to_vector());
  // Later writes through the source show in the destination: they are one buffer now.
  b.copy_(Tensor::full({2, 3}, 5.0));
  EXPECT_EQ(a.to_vector(), std::vector<double>(6, 5.0));
}

TEST(TensorTest, GradAccessors) {
  Tensor x = Tensor::zeros({2}, DType::F64).requires_grad_();
  EXPECT_FALSE(x.grad().defined());
  x.set_grad(Tensor::full({2}, 1.5, DType::F64));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{1.5, 1.5}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_EQ(Tensor().grad_fn(), nullptr);
}

TEST(DeviceTest, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_EQ(Device::parse("cuda"), kCUDA);
  EXPECT_EQ(Device::parse("cuda:0"), kCUDA);
  EXPECT_EQ(kCPU.str(), "cpu");
  EXPECT_EQ(kCUDA.str(), "cuda:0");
  EXPECT_EQ(Device::parse(Device{DeviceType::CUDA, 3}.str()), (Device{DeviceType::CUDA, 3}));
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_STREQ(dtype_name(DType::BF16), "bf16");
  EXPECT_TRUE(is_floating(DType::BF16));
  EXPECT_FALSE(is_floating(DType::I64));
}

}  // namespace
}  // namespace ft
