// Misuse raises ft::Error with a message naming the op (and, where it helps, the shapes or
// dtypes). Device-side index checks (gather_rows, cross_entropy on CUDA) raise at the next
// synchronizing read, as the headers promise, and leave the device usable afterwards.
#include <vector>

#include "lib/ops/cross_entropy/cross_entropy.h"
#include "lib/ops/dropout/dropout.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/random/random.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/test_util.h"

#if FT_WITH_CUDA
#include "lib/cuda/runtime.h"
#endif

namespace ft {
namespace {

using namespace ft::test;

TEST(ErrorsTest, MismatchedShapes) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  EXPECT_FT_ERROR(add(a, b), "add");
  EXPECT_FT_ERROR(add(a, b), "[2, 3]");  // the shapes are named too
  EXPECT_FT_ERROR(add(a, b), "[4]");
  EXPECT_FT_ERROR(mul(a, Tensor::zeros({3, 3})), "mul");
  EXPECT_FT_ERROR(sub(Tensor::zeros({2, 1, 3}), Tensor::zeros({2, 4})), "sub");
  EXPECT_FT_ERROR(div(a, b), "div");
  EXPECT_FT_ERROR(gt(a, b), "compare");
  EXPECT_FT_ERROR(expand(a, {4, 3}), "expand");
  EXPECT_FT_ERROR(sum_to(a, {4}), "sum_to");
  EXPECT_FT_ERROR(sum_to(a, {1, 2, 3}), "sum_to");
}

TEST(ErrorsTest, MismatchedDTypes) {
  const Tensor a = Tensor::zeros({2, 3}, DType::F32), b = Tensor::zeros({2, 3}, DType::F64);
  EXPECT_FT_ERROR(add(a, b), "add");
  EXPECT_FT_ERROR(add(a, b), "f64");
  EXPECT_FT_ERROR(matmul(a, Tensor::zeros({3, 2}, DType::F64)), "matmul");
  EXPECT_FT_ERROR(where(Tensor::zeros({2, 3}, DType::U8), a, b), "where");
  EXPECT_FT_ERROR(where(a, a, a), "u8");  // cond must be a comparison result
  EXPECT_FT_ERROR(linear(a, Tensor::zeros({4, 3}, DType::F64)), "linear");
}

TEST(ErrorsTest, FloatingOnlyOpsRejectIntegers) {
  const Tensor ids = Tensor::arange(6, DType::I64);
  EXPECT_FT_ERROR(exp(ids), "floating");
  EXPECT_FT_ERROR(add(ids, ids), "floating");
  EXPECT_FT_ERROR(sum(ids), "floating");
  EXPECT_FT_ERROR(matmul(ids.reshape({2, 3}), ids.reshape({3, 2})), "matmul");
  Generator gen(1);
  EXPECT_FT_ERROR(Tensor::rand({2}, gen, DType::I32), "rand");
  EXPECT_FT_ERROR(Tensor::randn({2}, gen, DType::I64), "randn");
}

TEST(ErrorsTest, MismatchedDevices) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({2, 3}, DType::F32, kCUDA);
  EXPECT_FT_ERROR(add(a, b), "add");
  EXPECT_FT_ERROR(add(a, b), "devices");
  EXPECT_FT_ERROR(matmul(a, b.reshape({3, 2})), "matmul");
  EXPECT_FT_ERROR(gather_rows(b, Tensor::arange(2, DType::I64)), "gather_rows");
  EXPECT_FT_ERROR(cat({a, b}, 0), "cat");
  EXPECT_FT_ERROR(cross_entropy(b, Tensor::arange(2, DType::I64)), "cross_entropy");
}

TEST(ErrorsTest, MatmulShapes) {
  EXPECT_FT_ERROR(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), "matmul");
  EXPECT_FT_ERROR(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), "inner");
  EXPECT_FT_ERROR(matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 5}), false, true), "matmul");
  EXPECT_FT_ERROR(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), "matmul");  // 1-D operand
  EXPECT_FT_ERROR(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2})), "batch");
}

TEST(ErrorsTest, ShapeOps) {
  const Tensor x = Tensor::zeros({4, 6});
  EXPECT_FT_ERROR(reshape(x, {5, 5}), "reshape");
  EXPECT_FT_ERROR(x.reshape({7, -1}), "reshape");
  EXPECT_FT_ERROR(x.reshape({-1, -1}), "reshape");
  EXPECT_FT_ERROR(narrow(x, 0, 3, 2), "narrow");
  EXPECT_FT_ERROR(narrow(x, 1, -1, 2), "narrow");
  EXPECT_FT_ERROR(narrow(x, 2, 0, 1), "narrow");  // no such dim
  EXPECT_FT_ERROR(x.narrow(1, 0, 7), "narrow");
  EXPECT_FT_ERROR(transpose(Tensor::zeros({3})), "transpose");
  EXPECT_FT_ERROR(cat({x, Tensor::zeros({4, 5})}, 0), "cat");
  EXPECT_FT_ERROR(cat({}, 0), "cat");
  EXPECT_FT_ERROR(x.size(2), "size");
  EXPECT_FT_ERROR(Tensor::empty({2, -1}), "negative");
  EXPECT_FT_ERROR(Tensor::from_vector({1, 2, 3}, {2, 2}), "from_vector");
}

TEST(ErrorsTest, GatherRowsIdOutOfRangeOnCpuThrowsAtTheCall) {
  const Tensor table = Tensor::zeros({5, 3});
  EXPECT_FT_ERROR(gather_rows(table, Tensor::from_vector({0, 5, 1}, {3}, DType::I64)), "gather_rows");
  EXPECT_FT_ERROR(gather_rows(table, Tensor::from_vector({0, 5, 1}, {3}, DType::I64)), "out of range");
  EXPECT_FT_ERROR(gather_rows(table, Tensor::from_vector({-1}, {1}, DType::I32)), "gather_rows");
  EXPECT_FT_ERROR(gather_rows(table, Tensor::from_vector({0}, {1}, DType::F32)), "gather_rows");  // float ids
  EXPECT_FT_ERROR(gather_rows(Tensor::zeros({5}), Tensor::from_vector({0}, {1}, DType::I64)), "gather_rows");
}

TEST(ErrorsTest, GatherRowsIdOutOfRangeOnCudaThrowsAtTheNextRead) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const Tensor table = Tensor::zeros({5, 4}, DType::F32, kCUDA);
  const Tensor bad = Tensor::from_vector({0, 7, 1}, {3}, DType::I64, kCUDA);
  // Through ft::synchronize().
  {
    Tensor out;
    EXPECT_NO_THROW(out = gather_rows(table, bad));  // the check runs on the device
    // The error is raised once and then cleared, so this checks both the throw and the message.
    EXPECT_TRUE(error_mentions([] { synchronize(); }, "gather"));
  }
  // Through an explicit read of the result.
  {
    Tensor out;
    EXPECT_NO_THROW(out = gather_rows(table, Tensor::from_vector({-3}, {1}, DType::I32, kCUDA)));
    EXPECT_TRUE(error_mentions([&] { (void)out.to(kCPU); }, "gather"));
  }
  // The flag is cleared once raised: the device stays usable.
  EXPECT_NO_THROW(synchronize());
  const Tensor good = gather_rows(table, Tensor::from_vector({4, 0}, {2}, DType::I64, kCUDA));
  EXPECT_NO_THROW(good.to(kCPU));
}

TEST(ErrorsTest, CrossEntropyTargetOutOfRange) {
  const Tensor logits = Tensor::zeros({3, 4}, DType::F64);
  EXPECT_FT_ERROR(cross_entropy(logits, Tensor::from_vector({0, 4, 1}, {3}, DType::I64)), "cross_entropy");
  EXPECT_FT_ERROR(cross_entropy(logits, Tensor::from_vector({0, -1, 1}, {3}, DType::I32)), "target");
  // ignore_index is the only value outside [0, V) that is allowed.
  EXPECT_NO_THROW(cross_entropy(logits, Tensor::from_vector({0, -100, 1}, {3}, DType::I64)));
  EXPECT_FT_ERROR(cross_entropy(logits, Tensor::from_vector({0, 1}, {2}, DType::I64)), "cross_entropy");
  EXPECT_FT_ERROR(cross_entropy(logits, Tensor::from_vector({0, 1, 2}, {3}, DType::F32)), "cross_entropy");
  EXPECT_FT_ERROR(cross_entropy(Tensor::zeros({12}, DType::F64), Tensor::from_vector({0}, {1}, DType::I64)),
                  "cross_entropy");
}

TEST(ErrorsTest, CrossEntropyTargetOutOfRangeOnCudaThrowsAtTheNextRead) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  const Tensor logits = Tensor::zeros({3, 4}, DType::F32, kCUDA);
  Tensor loss;
  EXPECT_NO_THROW(loss = cross_entropy(logits, Tensor::from_vector({0, 9, 1}, {3}, DType::I64, kCUDA)));
  EXPECT_TRUE(error_mentions([&] { loss.item(); }, "cross_entropy"));
  EXPECT_NO_THROW(synchronize());
  EXPECT_NO_THROW(loss = cross_entropy(logits, Tensor::from_vector({0, -100, 3}, {3}, DType::I64, kCUDA)));
  EXPECT_NO_THROW(loss.item());
}

TEST(ErrorsTest, ItemNeedsExactlyOneElement) {
  EXPECT_FT_ERROR(Tensor::zeros({2, 3}).item(), "item");
  EXPECT_FT_ERROR(Tensor::zeros({0}).item(), "item");
  EXPECT_FT_ERROR(Tensor().item(), "item");
  EXPECT_NO_THROW(Tensor::zeros({1, 1}).item());
}

TEST(ErrorsTest, CompositeContracts) {
  const Tensor x = Tensor::zeros({4, 6});
  EXPECT_FT_ERROR(layer_norm(x, Tensor::zeros({5}), Tensor::zeros({6})), "layer_norm");
  EXPECT_FT_ERROR(linear(x, Tensor::zeros({3, 5})), "linear");
  EXPECT_FT_ERROR(linear(x, Tensor::zeros({3, 6}), Tensor::zeros({4})), "bias");
  EXPECT_FT_ERROR(dropout(x, 1.5, 0, 0), "dropout");
  EXPECT_FT_ERROR(dropout(x, -0.1, 0, 0), "dropout");
  EXPECT_FT_ERROR(sum(Tensor::zeros({})), "reduce");
  EXPECT_FT_ERROR(max(Tensor::zeros({3, 0})), "max");
}

TEST(ErrorsTest, AutogradMisuse) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_FT_ERROR(x.backward(), "backward");  // nothing requires grad
  x.requires_grad_();
  const Tensor y = x * 2.0;
  EXPECT_FT_ERROR(y.backward(), "backward");  // not a scalar
  EXPECT_FT_ERROR(x.set_grad(Tensor::zeros({3, 2})), "set_grad");
  EXPECT_FT_ERROR(x.assign_(Tensor::zeros({2, 3}, DType::F64)), "assign_");
  EXPECT_FT_ERROR(x.copy_(Tensor::zeros({7})), "copy_");
  EXPECT_FT_ERROR(Tensor().grad(), "grad");
}

TEST(ErrorsTest, DeviceAndKernelModeNames) {
  EXPECT_FT_ERROR(Device::parse("gpu"), "device");
  EXPECT_FT_ERROR(Device::parse("cuda:x"), "device");
  EXPECT_EQ(Device::parse("cuda:1"), (Device{DeviceType::CUDA, 1}));
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_FT_ERROR(parse_kernel_mode("turbo"), "kernel mode");
}

#if FT_WITH_CUDA
// A failed launch check names the kernel for its own errors; a sticky fault of an earlier kernel
// is reported as seen there, not caused there. (Messages only: no device needed.)
TEST(ErrorsTest, LaunchErrorsBlameTheKernelOnlyForTheirOwnFaults) {
  const std::string own = cuda::launch_error_message(cudaErrorInvalidConfiguration, "norm_forward_kernel");
  EXPECT_NE(own.find("cudaErrorInvalidConfiguration"), std::string::npos) << own;
  EXPECT_NE(own.find("in the launch of norm_forward_kernel"), std::string::npos) << own;
  EXPECT_EQ(own.find("before it"), std::string::npos) << own;
  for (cudaError_t earlier : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert, cudaErrorMisalignedAddress}) {
    const std::string seen = cuda::launch_error_message(earlier, "norm_forward_kernel");
    EXPECT_NE(seen.find(cudaGetErrorName(earlier)), std::string::npos) << seen;
    EXPECT_NE(seen.find("seen at the launch of norm_forward_kernel"), std::string::npos) << seen;
    EXPECT_NE(seen.find("a kernel that ran before it faulted"), std::string::npos) << seen;
    EXPECT_NE(seen.find("compute-sanitizer"), std::string::npos) << seen;
  }
}
#endif

}  // namespace
}  // namespace ft
