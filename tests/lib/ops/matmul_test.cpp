// matmul: plain, batched, with either operand transposed, and with a 2-D b shared by every
// batch. CPU f64 values against a triple loop written here, gradient checks in f64 (both
// operands, and each alone), and every device × dtype against the CPU f64 reference.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lib/grad_buffer.h"
#include "lib/ops/linear/linear.h"
#include "lib/ops/matmul/hopper_gemm.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/rope/rope.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"

namespace ft {
namespace {

using namespace ft::test;

struct MatmulCase {
  Shape batch;  // a's leading dims
  int64_t m, k, n;
  bool trans_a, trans_b;
  bool shared_b;  // b is 2-D and serves every batch
};

std::string case_name(const MatmulCase& c) {
  return shape_str(c.batch) + " m" + std::to_string(c.m) + " k" + std::to_string(c.k) + " n" + std::to_string(c.n) +
         (c.trans_a ? " aT" : "") + (c.trans_b ? " bT" : "") + (c.shared_b ? " shared b" : "");
}

Shape shape_a(const MatmulCase& c) {
  Shape s = c.batch;
  s.push_back(c.trans_a ? c.k : c.m);
  s.push_back(c.trans_a ? c.m : c.k);
  return s;
}
Shape shape_b(const MatmulCase& c) {
  Shape s = c.shared_b ? Shape{} : c.batch;
  s.push_back(c.trans_b ? c.n : c.k);
  s.push_back(c.trans_b ? c.k : c.n);
  return s;
}

/// op(A) @ op(B) in doubles, indexing the stored (row-major) operands directly.
std::vector<double> reference_matmul(const MatmulCase& c, const std::vector<double>& a, const std::vector<double>& b) {
  const int64_t batch = shape_numel(c.batch), m = c.m, k = c.k, n = c.n;
  std::vector<double> out(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t p = 0; p < batch; ++p) {
    const double* pa = a.data() + p * m * k;
    const double* pb = b.data() + (c.shared_b ? 0 : p * k * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t t = 0; t < k; ++t)
          acc += (c.trans_a ? pa[t * m + i] : pa[i * k + t]) * (c.trans_b ? pb[j * k + t] : pb[t * n + j]);
        out[static_cast<size_t>((p * m + i) * n + j)] = acc;
      }
  }
  return out;
}

/// Every combination of transposes for one set of sizes, batched or shared b.
void add_all_transposes(std::vector<MatmulCase>& cases, Shape batch, int64_t m, int64_t k, int64_t n, bool shared_b) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) cases.push_back({batch, m, k, n, ta, tb, shared_b});
}

// Sizes that are 1 or not multiples of 4, 32 or 128, every transpose combination, batches of
// 2-D and 3-D leading dims, and a shared 2-D b.
std::vector<MatmulCase> device_cases() {
  std::vector<MatmulCase> cases;
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {3, 5, 4}, {33, 129, 17}, {129, 33, 257}, {1, 257, 3}, {257, 1, 33}})
    cases.push_back({{}, m, k, n, false, false, false});
  add_all_transposes(cases, {}, 33, 65, 17, false);
  add_all_transposes(cases, {3}, 33, 17, 129, false);
  add_all_transposes(cases, {4}, 33, 65, 17, true);
  add_all_transposes(cases, {1}, 5, 3, 7, true);
  cases.push_back({{2, 3}, 5, 7, 4, false, false, false});
  cases.push_back({{2, 3}, 5, 7, 4, true, true, true});
  return cases;
}

std::vector<MatmulCase> small_cases() {
  std::vector<MatmulCase> cases;
  add_all_transposes(cases, {}, 3, 4, 5, false);
  add_all_transposes(cases, {2}, 3, 4, 2, false);
  add_all_transposes(cases, {3}, 2, 4, 3, true);
  cases.push_back({{2, 2}, 2, 3, 2, false, true, false});
  cases.push_back({{2, 2}, 2, 3, 2, true, false, true});
  cases.push_back({{}, 1, 1, 1, false, false, false});
  return cases;
}

std::vector<Tensor> matmul_inputs(const MatmulCase& c, Generator& gen) {
  return {random_tensor(shape_a(c), DType::F64, kCPU, gen), random_tensor(shape_b(c), DType::F64, kCPU, gen)};
}

TensorFn matmul_fn(const MatmulCase& c) {
  return [c](const std::vector<Tensor>& in) { return matmul(in[0], in[1], c.trans_a, c.trans_b); };
}

TEST(MatmulTest, CpuF64MatchesTripleLoop) {
  Generator gen = test_generator();
  for (const MatmulCase& c : device_cases()) {
    SCOPED_TRACE(case_name(c));
    const std::vector<Tensor> in = matmul_inputs(c, gen);
    const Tensor y = matmul(in[0], in[1], c.trans_a, c.trans_b);
    Shape expected_shape = c.batch;
    expected_shape.push_back(c.m);
    expected_shape.push_back(c.n);
    ASSERT_EQ(y.shape(), expected_shape);
    const Tensor expected =
        Tensor::from_vector(reference_matmul(c, in[0].to_vector(), in[1].to_vector()), expected_shape, DType::F64);
    EXPECT_TRUE(all_close(y, expected, 1e-13));
  }
}

TEST(MatmulTest, GradCheckF64) {
  Generator gen = test_generator();
  for (const MatmulCase& c : small_cases()) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(gradcheck(matmul_fn(c), matmul_inputs(c, gen), gen));
  }
}

// A frozen operand (an input batch, frozen weights) must not break the other one's gradient.
TEST(MatmulTest, GradCheckOneOperandF64) {
  Generator gen = test_generator();
  for (const MatmulCase& c : small_cases()) {
    SCOPED_TRACE(case_name(c));
    const std::vector<Tensor> in = matmul_inputs(c, gen);
    EXPECT_TRUE(gradcheck(matmul_fn(c), in, gen, {.wrt = {true, false}})) << "a only";
    EXPECT_TRUE(gradcheck(matmul_fn(c), in, gen, {.wrt = {false, true}})) << "b only";
  }
}

class MatmulDeviceTest : public ::testing::TestWithParam<DeviceDType> {};

TEST_P(MatmulDeviceTest, MatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const MatmulCase& c : device_cases()) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(matches_f64_reference(matmul_fn(c), matmul_inputs(c, gen), p.device, p.dtype, gen,
                                      forward_tolerance(p.dtype), grad_tolerance(p.dtype)));
  }
}

TEST_P(MatmulDeviceTest, OneOperandGradientMatchesF64Reference) {
  const DeviceDType p = GetParam();
  FT_SKIP_UNLESS_AVAILABLE(p.device);
  Generator gen = test_generator();
  for (const MatmulCase& c : {MatmulCase{{4}, 33, 65, 17, false, true, true}, MatmulCase{{3}, 5, 7, 9, true, false, false}}) {
    SCOPED_TRACE(case_name(c));
    const std::vector<Tensor> in = matmul_inputs(c, gen);
    EXPECT_TRUE(matches_f64_reference(matmul_fn(c), in, p.device, p.dtype, gen, forward_tolerance(p.dtype),
                                      grad_tolerance(p.dtype), {true, false}))
        << "a only";
    EXPECT_TRUE(matches_f64_reference(matmul_fn(c), in, p.device, p.dtype, gen, forward_tolerance(p.dtype),
                                      grad_tolerance(p.dtype), {false, true}))
        << "b only";
  }
}

// ---- autotuning (lib/ops/matmul/matmul.h)

/// Autotuning on for a scope, then back to what it was.
struct AutotuneScope {
  bool before = gemm_autotune();
  AutotuneScope() { set_gemm_autotune(true); }
  ~AutotuneScope() { set_gemm_autotune(before); }
};

// The tuner times cuBLASLt's candidates into a scratch output. The tuned products still match the
// f64 reference, and a weight gradient added into its f32 view (a product with beta = 1, whose
// addend is the view itself) is added once: the second backward doubles the first.
TEST(MatmulAutotuneTest, TunedProductsMatchAndAddOnce) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  AutotuneScope autotune;
  Generator gen = test_generator();
  for (const MatmulCase& c : device_cases()) {
    SCOPED_TRACE(case_name(c));
    EXPECT_TRUE(matches_f64_reference(matmul_fn(c), matmul_inputs(c, gen), kCUDA, DType::BF16, gen,
                                      forward_tolerance(DType::BF16), grad_tolerance(DType::BF16)));
  }
  // Large enough that cuBLASLt offers several candidates.
  const Tensor x = random_tensor({1024, 384}, DType::BF16, kCUDA, gen), dy = random_tensor({1024, 256}, DType::BF16, kCUDA, gen);
  Tensor w = fresh_leaf(random_tensor({256, 384}, DType::F64, kCPU, gen), DType::BF16, kCUDA);
  Tensor b = fresh_leaf(random_tensor({256}, DType::F64, kCPU, gen), DType::BF16, kCUDA);
  GradBuffer buffer({w, b});
  linear(x, w, b).backward(dy);
  const Tensor once = fresh_copy(w.grad(), DType::F64, kCPU);
  const Tensor expected = matmul(dy.to(kCPU).to(DType::F64), x.to(kCPU).to(DType::F64), true, false);
  EXPECT_TRUE(all_close(once, expected, grad_tolerance(DType::BF16)));
  // The second backward adds into the view: a product with beta = 1 and no bias-gradient
  // epilogue (the bias gradient is added apart), so another configuration, tuned now.
  linear(x, w, b).backward(dy);
  EXPECT_TRUE(all_close(w.grad().to(kCPU).to(DType::F64), once * 2.0, 1e-6));
}

// With a tuning file: a configuration timed here is recorded there (an index among the 8
// candidates); one the file already holds runs its recorded candidate without timing, so the
// file keeps it; a recorded index past the candidates cuBLASLt offers is timed again and
// replaced. Each shape is new to the process (the choices are also cached in memory).
TEST(MatmulAutotuneTest, TheTuningFileRecordsAndReplays) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  AutotuneScope autotune;
  test::TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  const std::string before = gemm_tuning_file();
  set_gemm_tuning_file(path);
  Generator gen = test_generator();
  auto product = [&](int64_t m) {
    const Tensor a = random_tensor({m, 320}, DType::BF16, kCUDA, gen), b = random_tensor({320, 192}, DType::BF16, kCUDA, gen);
    const Tensor c = matmul(a, b);
    EXPECT_TRUE(all_close(c.to(kCPU).to(DType::F64), matmul(a.to(kCPU).to(DType::F64), b.to(kCPU).to(DType::F64)),
                          forward_tolerance(DType::BF16)));
  };
  product(1031);
  std::map<std::string, int> recorded;
  auto read = [&] {
    recorded.clear();
    std::ifstream in(path);
    std::string line, key;
    std::getline(in, line);
    EXPECT_NE(line.find("fusedtrain gemm tuning v1 device="), std::string::npos) << line;
    int index = 0;
    while (in >> key >> index) recorded[key] = index;
  };
  read();
  ASSERT_EQ(recorded.size(), 1u) << "the timed configuration was not recorded";
  EXPECT_LT(recorded.begin()->second, 8);
  // Two new shapes whose keys are the first one's with m changed (the key's third field is the
  // column-major n, i.e. the row-major m): one recorded as candidate 0, one as 99.
  const std::string first = recorded.begin()->first;
  auto with_m = [&](int64_t m) {
    std::string key = first;
    const size_t at = key.find(",1031,");
    EXPECT_NE(at, std::string::npos) << key;
    std::string field = ",";  // built in steps: GCC 12 warns (-Wrestrict) on "," + to_string + ","
    field += std::to_string(m);
    field += ',';
    return key.replace(at, 6, field);
  };
  {
    std::ofstream out(path, std::ios::app);
    out << with_m(1033) << " 0\n" << with_m(1039) << " 99\n";
  }
  set_gemm_tuning_file(path);  // named again: read again
  product(1033);
  product(1039);
  read();
  EXPECT_EQ(recorded[with_m(1033)], 0) << "a recorded choice was timed again";
  EXPECT_LT(recorded[with_m(1039)], 8) << "an impossible choice was kept";
  set_gemm_tuning_file(before);
}

/// Whether this machine runs hopper_gemm (a CUDA build on an sm_90 device).
bool hopper_gemm_here() {
  if (!cuda_available()) return false;
  const Tensor probe = Tensor::empty({8, 8}, DType::BF16, kCUDA);
  if constexpr (kCudaBuild) return cuda::hopper_gemm_supported(probe, probe);
  return false;
}

// Our own Hopper product (lib/ops/matmul/hopper_gemm.h) against the f64 product of the same
// bf16 inputs, and against cuBLASLt's bf16 result: within bf16's output rounding of both. The
// shapes take one tile, tiles cut at every edge (M, N not multiples of 128 or 256, K not of 64),
// more K slices than the ring has stages, and a Llama projection's width.
TEST(HopperGemmTest, MatchesTheF64ProductAndCublas) {
  if (!hopper_gemm_here()) GTEST_SKIP() << "hopper_gemm needs an sm_90 device";
  Generator gen = test_generator();
  struct Case {
    int64_t m, n, k;
  };
  for (const Case& c : {Case{128, 128, 64}, Case{1, 8, 8}, Case{37, 136, 200}, Case{300, 264, 1000},
                        Case{512, 384, 4096}, Case{1024, 2048, 2048}}) {
    SCOPED_TRACE(testing::Message() << "M " << c.m << " N " << c.n << " K " << c.k);
    const Tensor a = random_tensor({c.m, c.k}, DType::BF16, kCUDA, gen);
    const Tensor b = random_tensor({c.n, c.k}, DType::BF16, kCUDA, gen);
    Tensor out = Tensor::empty({c.m, c.n}, DType::BF16, kCUDA);
    if constexpr (kCudaBuild) cuda::hopper_gemm(a, b, out);
    const Tensor reference = matmul(cast(a.to(kCPU), DType::F64), cast(b.to(kCPU), DType::F64), false, true);
    EXPECT_TRUE(all_close(cast(out.to(kCPU), DType::F64), reference, 4e-3)) << "against the f64 product";
    const Tensor cublas = matmul(a, b, false, true);
    EXPECT_TRUE(all_close(cast(out.to(kCPU), DType::F64), cast(cublas.to(kCPU), DType::F64), 8e-3)) << "against cuBLASLt";
  }
  // C's rows are stored by TMA: 16-byte rows, N a multiple of 8.
  const Tensor a = random_tensor({4, 8}, DType::BF16, kCUDA, gen), b = random_tensor({6, 8}, DType::BF16, kCUDA, gen);
  if constexpr (kCudaBuild) {
    EXPECT_FALSE(cuda::hopper_gemm_supported(a, b));
  }
}

// The RoPE epilogue (a query or key projection turned before its one rounding) against rope of
// the f64 product, and against rope(matmul) on the device (rounded twice), at heads of 64 and
// 128 columns, with Llama 3's scaling, rows cut at a tile's edge.
TEST(HopperGemmTest, RopeEpilogueMatchesRopeOfTheProduct) {
  if (!hopper_gemm_here()) GTEST_SKIP() << "hopper_gemm needs an sm_90 device";
  Generator gen = test_generator();
  const RopeConfig llama3{.theta = 500000.0, .factor = 32.0, .original_max_position = 64};
  struct Case {
    int64_t batch, tokens, heads, head_size, k;
  };
  for (const Case& c : {Case{2, 256, 8, 64, 256}, Case{3, 100, 4, 128, 200}, Case{1, 2048, 2, 64, 64}}) {
    SCOPED_TRACE(testing::Message() << "B " << c.batch << " T " << c.tokens << " H " << c.heads << " HS "
                                    << c.head_size << " K " << c.k);
    const int64_t m = c.batch * c.tokens, n = c.heads * c.head_size;
    const Tensor a = random_tensor({m, c.k}, DType::BF16, kCUDA, gen);
    const Tensor b = random_tensor({n, c.k}, DType::BF16, kCUDA, gen);
    Tensor out = Tensor::empty({m, n}, DType::BF16, kCUDA);
    if constexpr (kCudaBuild) cuda::hopper_gemm(a, b, out, cuda::GemmRope{c.tokens, c.head_size, llama3});
    const Shape heads{c.batch, c.tokens, c.heads, c.head_size};
    const Tensor product = matmul(cast(a.to(kCPU), DType::F64), cast(b.to(kCPU), DType::F64), false, true);
    const Tensor reference = rope_composite(product.reshape(heads), llama3).reshape({m, n});
    const Tensor ours = cast(out.to(kCPU), DType::F64);
    EXPECT_TRUE(all_close(ours, reference, 4e-3)) << "against rope of the f64 product";
    const Tensor twice_rounded = rope(matmul(a, b, false, true).reshape(heads), llama3).reshape({m, n});
    EXPECT_TRUE(all_close(ours, cast(twice_rounded.to(kCPU), DType::F64), 8e-3)) << "against rope(matmul)";
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatmulDeviceTest, ::testing::ValuesIn(device_dtypes()),
                         [](const auto& info) { return device_dtype_name(info.param); });

}  // namespace
}  // namespace ft
