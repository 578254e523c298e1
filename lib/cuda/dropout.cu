// Fused dropout and bias + dropout + residual. Forward reads x (bias, residual) once and writes
// the output once; backward regenerates the Philox mask from (seed, offset) instead of reading
// a stored one, writes dx and, for the bias, sums dx down the columns in the same launch.
// Four elements share one Philox call. Replaces the twin's philox_uniform, ge, cast and mul
// kernels (and the add kernels of bias and residual).
#include "lib/cuda/row_map.cuh"
#include "lib/ops/dropout.h"

namespace ft::cuda {

namespace {

template <class T>
__device__ __forceinline__ void load4(const T* p, int64_t i, int64_t n, float (&v)[4]) {
  if (i + 4 <= n && reinterpret_cast<uintptr_t>(p + i) % (4 * sizeof(T)) == 0) {
    load_pack<T, 4>(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = i + k < n ? to_acc(p[i + k]) : 0.0f;
  }
}

template <class T>
__device__ __forceinline__ void store4(T* p, int64_t i, int64_t n, const float (&v)[4]) {
  if (i + 4 <= n && reinterpret_cast<uintptr_t>(p + i) % (4 * sizeof(T)) == 0) {
    store_pack<T, 4>(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k < n) p[i + k] = from_acc<T>(v[k]);
  }
}

// Over the flat tensor in groups of 4 (map_kernel with one row of n rounded up to 4).
template <class T>
struct DropoutForward {
  const T* x;
  const T* bias;
  const T* residual;
  T* out;
  int64_t n, cols;
  uint64_t seed;
  const int64_t* offset;
  float p, scale;
  __device__ void operator()(int64_t, int64_t i, float (&)[4]) const {
    float v[4], r[4] = {};
    load4(x, i, n, v);
    if (residual) load4(residual, i, n, r);
    bool keep[4];
    dropout_keep4(seed, static_cast<uint64_t>(*offset), static_cast<uint64_t>(i), p, keep);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float b = bias && i + k < n ? to_acc(bias[(i + k) % cols]) : 0.0f;
      v[k] = r[k] + (keep[k] ? (v[k] + b) * scale : 0.0f);
    }
    store4(out, i, n, v);
  }
};

// dx = keep·scale·dy. As a flat map (rows = 1) or, for the bias gradient, over [rows, cols]
// with the column sums; `cols` is the row width either way.
template <class T, int VEC>
struct DropoutBackward {
  const T* dy;
  T* dx;
  int64_t n, cols;
  uint64_t seed;
  const int64_t* offset;
  float p, scale;
  __device__ void operator()(int64_t r, int64_t c, float (&sums)[VEC]) const {
    const int64_t i = r * cols + c;
    const uint64_t base = static_cast<uint64_t>(*offset);
    if constexpr (VEC == 4) {
      float g[4];
      load4(dy, i, n, g);
      bool keep[4];
      dropout_keep4(seed, base, static_cast<uint64_t>(i), p, keep);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        g[k] = keep[k] ? g[k] * scale : 0.0f;
        sums[k] = rounded<T>(g[k]);
      }
      store4(dx, i, n, g);
    } else {
      const float g = philox::uniform(seed, base, static_cast<uint64_t>(i)) >= p ? to_acc(dy[i]) * scale : 0.0f;
      dx[i] = from_acc<T>(g);
      sums[0] = rounded<T>(g);
    }
  }
};

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p, uint64_t seed,
                     const Tensor& offset, const Tensor& out) {
  const int64_t n = x.numel();
  dispatch_half_float(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    DropoutForward<T> op{x.data<T>(),
                         bias.defined() ? bias.data<T>() : nullptr,
                         residual.defined() ? residual.data<T>() : nullptr,
                         out.data<T>(),
                         n,
                         x.size(-1),
                         seed,
                         offset.data<int64_t>(),
                         static_cast<float>(p),
                         static_cast<float>(1.0 / (1.0 - p))};
    launch_map<4>(op, 1, (n + 3) / 4 * 4);
  });
}

void dropout_backward(const Tensor& dy, double p, uint64_t seed, const Tensor& offset, const Tensor& dx,
                      const Tensor& dbias) {
  const int64_t n = dy.numel(), cols = dy.size(-1), rows = n / cols;
  const float pf = static_cast<float>(p), scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch_half_float(dy.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    if (!dbias.defined()) {
      launch_map<4>(DropoutBackward<T, 4>{dy.data<T>(), dx.data<T>(), n, (n + 3) / 4 * 4, seed,
                                          offset.data<int64_t>(), pf, scale},
                    1, (n + 3) / 4 * 4);
    } else if (cols % 4 == 0) {
      launch_map_reduce_columns<4, T>(
          DropoutBackward<T, 4>{dy.data<T>(), dx.data<T>(), n, cols, seed, offset.data<int64_t>(), pf, scale}, rows,
          cols, dbias.data<T>());
    } else {
      launch_map_reduce_columns<1, T>(
          DropoutBackward<T, 1>{dy.data<T>(), dx.data<T>(), n, cols, seed, offset.data<int64_t>(), pf, scale}, rows,
          cols, dbias.data<T>());
    }
  });
}

}  // namespace ft::cuda
