#include "bench/ft-bench/gemm_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/ft-bench/graph_timer.h"
#include "lib/ops/matmul/hopper_gemm.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/matmul/matmul_cuda.h"
#include "lib/ops/rope/rope.h"

namespace ft::bench {

namespace {

/// The query and key projections of a Llama-3.2-1B step (B 4, T 2048, heads of 64) with RoPE:
/// cuBLASLt then the rope kernel, against hopper_gemm turning them in its epilogue.
void rope_rows(const OpsBenchOptions& options) {
  struct Case {
    const char* name;
    int64_t n;
  };
  const int64_t batch = 4, tokens = 2048, head_size = 64, width = 2048;
  const RopeConfig config{.theta = 500000.0, .factor = 32.0, .original_max_position = 8192};
  std::printf("\nprojection + RoPE (graph ms)   %8s %8s %8s %14s %9s %10s\n", "M", "N", "K", "cuBLASLt+rope",
              "ours", "theirs/ours");
  Generator gen(19);
  for (const Case& s : {Case{"llama-1b q + rope", 2048}, Case{"llama-1b k + rope", 512}}) {
    const int64_t m = batch * tokens;
    const Tensor a = Tensor::randn({m, width}, gen, DType::BF16, kCUDA);
    const Tensor b = Tensor::randn({s.n, width}, gen, DType::BF16, kCUDA);
    const Tensor ours = Tensor::empty({m, s.n}, DType::BF16, kCUDA);
    const Shape heads{batch, tokens, s.n / head_size, head_size};
    (void)rope(ours.reshape(heads), config);  // the tables, made before any capture
    const double theirs_ms =
        time_device_work([&] { (void)rope(matmul(a, b, false, true).reshape(heads), config); }, options.warmup,
                         options.iterations)
            .graph_ms;
    const double ours_ms = time_device_work([&] { cuda::hopper_gemm(a, b, ours, cuda::GemmRope{tokens, head_size, config}); },
                                            options.warmup, options.iterations)
                               .graph_ms;
    std::printf("%-30s %8lld %8lld %8lld %14.4f %9.4f %9.2fx\n", s.name, static_cast<long long>(m),
                static_cast<long long>(s.n), static_cast<long long>(width), theirs_ms, ours_ms, theirs_ms / ours_ms);
    std::printf("RESULT gemm_rope=%s cublas_rope_ms=%.4f ours_ms=%.4f\n", s.name, theirs_ms, ours_ms);
    std::fflush(stdout);
  }
}

}  // namespace

void gemm_table(const OpsBenchOptions& options) {
  struct Case {
    const char* name;
    int64_t m, n, k;
  };
  const Case shapes[] = {{"llama-1b q, o", 8192, 2048, 2048},   {"llama-1b k, v", 8192, 512, 2048},
                         {"llama-1b gate, up", 8192, 8192, 2048}, {"llama-1b down", 8192, 2048, 8192},
                         {"gpt2 qkv", 16384, 2304, 768},         {"gpt2 fc", 16384, 3072, 768},
                         {"gpt2 proj", 16384, 768, 3072}};
  Generator gen(17);
  const Tensor probe = Tensor::randn({8, 8}, gen, DType::BF16, kCUDA);
  if (!cuda::hopper_gemm_supported(probe, probe)) {
    std::printf("\nhopper_gemm: not an sm_90 device, table skipped\n");
    return;
  }
  std::printf("\nC = A·Bᵀ bf16 (graph ms)        %8s %8s %8s %9s %9s %10s\n", "M", "N", "K", "cuBLASLt", "ours",
              "ours/cuBLAS");
  for (const Case& s : shapes) {
    const Tensor a = Tensor::randn({s.m, s.k}, gen, DType::BF16, kCUDA);
    const Tensor b = Tensor::randn({s.n, s.k}, gen, DType::BF16, kCUDA);
    const Tensor theirs = Tensor::empty({s.m, s.n}, DType::BF16, kCUDA), ours = Tensor::empty({s.m, s.n}, DType::BF16, kCUDA);
    const double cublas_ms = time_device_work([&] { cuda::matmul(a, b, theirs, 1, s.m, s.n, s.k, false, true, false); },
                                              options.warmup, options.iterations)
                                 .graph_ms;
    const double ours_ms =
        time_device_work([&] { cuda::hopper_gemm(a, b, ours); }, options.warmup, options.iterations).graph_ms;
    const std::vector<double> x = ours.to_vector(), y = theirs.to_vector();
    double worst = 0, largest = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::abs(x[i] - y[i]));
      largest = std::max(largest, std::abs(y[i]));
    }
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    std::printf("%-30s %8lld %8lld %8lld %9.4f %9.4f %9.2fx   %5.0f / %5.0f TFLOP/s, max diff %.1e of max |C|\n",
                s.name, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                cublas_ms, ours_ms, cublas_ms / ours_ms, flops / cublas_ms / 1e9, flops / ours_ms / 1e9,
                largest > 0 ? worst / largest : worst);
    std::printf("RESULT gemm=%s m=%lld n=%lld k=%lld cublas_ms=%.4f ours_ms=%.4f\n", s.name, static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), cublas_ms, ours_ms);
    std::fflush(stdout);
  }
  rope_rows(options);
}

}  // namespace ft::bench
