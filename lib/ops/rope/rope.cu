// Fused RoPE: each thread turns V pairs (x[i..i+V), x[i+HS/2..i+HS/2+V)) of one row in
// registers, reading both halves and the f32 cos and sin of its token once, writing y once, in
// f32 with one rounding. The backward is the same kernel with the sines negated. Replaces the
// twin's narrow, neg, cat, two muls and an add (forward) and their gradient kernels.
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/rope/rope_cuda.h"

namespace ft::cuda {

namespace {

/// Rows are the [B·T·NH] vectors of HS; a row's token is (row / heads) % tokens. Work item k:
/// row k / packs, first pair (k % packs)·V.
template <class T, int V>
__global__ void rope_kernel(const T* x, const float* cos, const float* sin, T* y, int64_t rows, int heads,
                            int tokens, int half, float sign) {
  begin_dependent_kernel();
  const int packs = half / V;
  const int64_t items = rows * packs;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < items; k += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = k / packs;
    const int i = static_cast<int>(k % packs) * V;
    const int t = static_cast<int>((row / heads) % tokens);
    const int64_t base = row * 2 * half + i;
    float a[V], b[V], c[V], s[V];
    load_pack<T, V>(x + base, a);
    load_pack<T, V>(x + base + half, b);
    load_pack<float, V>(cos + static_cast<int64_t>(t) * half + i, c);
    load_pack<float, V>(sin + static_cast<int64_t>(t) * half + i, s);
    float first[V], second[V];
#pragma unroll
    for (int q = 0; q < V; ++q) {
      const float sq = sign * s[q];
      first[q] = a[q] * c[q] - b[q] * sq;
      second[q] = b[q] * c[q] + a[q] * sq;
    }
    store_pack<T, V>(y + base, first);
    store_pack<T, V>(y + base + half, second);
  }
}

}  // namespace

void rope_rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) {
  const int64_t tokens = x.size(1), heads = x.size(2), half = x.size(3) / 2, rows = x.numel() / (2 * half);
  FT_CHECK(cos.dtype() == DType::F32 && sin.dtype() == DType::F32 && cos.shape() == (Shape{tokens, half}) &&
               sin.shape() == cos.shape(),
           "rope: the tables must be f32 [", tokens, ", ", half, "], got ", shape_str(cos.shape()));
  if (rows == 0) return;
  dispatch_half_float(x.dtype(), "rope", [&](auto tag) {
    using T = decltype(tag);
    // A pack of 16 bytes of x's halves (8 bf16 or 4 f32) and as many f32 table entries, which
    // load_pack reads aligned to their whole size (32 bytes beside bf16).
    const auto aligned = [](const Tensor& t, size_t bytes) {
      return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
    };
    const size_t table_pack = sizeof(float) * kPackSize<T>;
    const bool packed = packable<T>(half, {x.data_ptr(), y.data_ptr()}) && aligned(cos, table_pack) &&
                        aligned(sin, table_pack);
    const float sign = inverse ? -1.0f : 1.0f;
    auto launch = [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      const int64_t items = rows * (half / V);
      launch_dependent(rope_kernel<T, V>, elementwise_blocks(items, kThreads), kThreads, 0, x.data<T>(),
                       cos.data<float>(), sin.data<float>(), y.data<T>(), rows, static_cast<int>(heads),
                       static_cast<int>(tokens), static_cast<int>(half), sign);
    };
    if (packed) launch(std::integral_constant<int, kPackSize<T>>{});
    else launch(std::integral_constant<int, 1>{});
  });
  FT_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace ft::cuda
