// Fused dropout and bias + dropout + residual. Forward reads x (bias, residual) once and writes
// the output once; backward regenerates the Philox mask from (seed, offset) instead of reading
// a stored one, writes dx and, for the bias, sums dx down the columns in the same launch.
// Eight elements share one Philox call (philox::dropout_uniform) in bf16 rows of a multiple of 8
// columns; f32 rows take packs of 4, half a call's bits each. Replaces the twin's philox_uniform, ge, cast and mul
// kernels (and the add kernels of bias and residual).
#include "lib/ops/dropout/dropout_cuda.h"

#include "lib/cuda/row_map.cuh"

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

__device__ __forceinline__ float dropped(float x, float bias, float residual, bool keep, float scale) {
  return residual + (keep ? (x + bias) * scale : 0.0f);
}

// 8 elements of a row whose width is a multiple of 8, 16-byte aligned (bf16): one access per
// operand and one Philox call.
template <class T>
struct DropoutForwardRows8 {
  const T* x;
  const T* bias;
  const T* residual;
  T* out;
  int64_t cols;
  uint64_t seed;
  const int64_t* offset;
  float p, scale;
  uint64_t base = 0;  // *offset, read once per thread
  __device__ void prepare() { base = load_once(offset); }
  __device__ void operator()(int64_t r, int64_t c, float (&)[8]) const {
    const int64_t i = r * cols + c;
    float v[8], res[8] = {}, b[8] = {};
    load_pack<T, 8>(x + i, v);
    if (residual) load_pack<T, 8>(residual + i, res);
    if (bias) load_pack<T, 8>(bias + c, b);
    bool keep[8];
    dropout_keep<8>(seed, base, static_cast<uint64_t>(i), p, keep);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = dropped(v[k], b[k], res[k], keep[k], scale);
    store_pack<T, 8>(out + i, v);
  }
};

// Groups of 4 elements: over [rows, cols] when cols % 4 == 0 (the bias column is c + k), else
// over the flat tensor as one row of n rounded up to 4 (the bias column takes a modulo).
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
  bool by_rows;
  uint64_t base = 0;  // *offset, read once per thread
  __device__ void prepare() { base = load_once(offset); }
  __device__ void operator()(int64_t r, int64_t c, float (&)[4]) const {
    const int64_t i = by_rows ? r * cols + c : c;
    float v[4], res[4] = {};
    load4(x, i, n, v);
    if (residual) load4(residual, i, n, res);
    bool keep[4];
    dropout_keep<4>(seed, base, static_cast<uint64_t>(i), p, keep);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float b = !bias || i + k >= n ? 0.0f : to_acc(bias[by_rows ? c + k : (i + k) % cols]);
      v[k] = dropped(v[k], b, res[k], keep[k], scale);
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
  uint64_t base = 0;  // *offset, read once per thread
  __device__ void prepare() { base = load_once(offset); }
  // Two phases (row_map.cuh): the column kernel loads the next row's dy while it finishes this
  // one. A pack of 8 (bf16) stays as loaded, 16 bytes, until finish unpacks it: unpacked in
  // load, the next row's 8 floats were moved between registers every iteration, a slower loop.
  struct Unpacked {
    float dy[VEC];
  };
  struct Raw {
    uint4 raw;
  };
  using Loaded = std::conditional_t<VEC == 8, Raw, Unpacked>;
  __device__ Loaded load(int64_t r, int64_t c) const {
    Loaded in;
    const int64_t i = r * cols + c;
    if constexpr (VEC == 8) {
      static_assert(sizeof(Pack<T, 8>) == sizeof(uint4), "packs of 8 are bf16");
      in.raw = __ldg(reinterpret_cast<const uint4*>(dy + i));
    } else if constexpr (VEC == 4) {
      load4(dy, i, n, in.dy);
    } else {
      in.dy[0] = to_acc(dy[i]);
    }
    return in;
  }
  __device__ void operator()(int64_t r, int64_t c, float (&sums)[VEC]) const { finish(r, c, load(r, c), sums); }
  __device__ void finish(int64_t r, int64_t c, const Loaded& in, float (&sums)[VEC]) const {
    const int64_t i = r * cols + c;
    if constexpr (VEC == 8) {  // one Philox call, one 16-byte access (bf16) per operand
      float g[8];
      const Pack<T, 8> pack = *reinterpret_cast<const Pack<T, 8>*>(&in.raw);
#pragma unroll
      for (int k = 0; k < 8; ++k) g[k] = element(pack, k);
      bool keep[8];
      dropout_keep<8>(seed, base, static_cast<uint64_t>(i), p, keep);
#pragma unroll
      for (int k = 0; k < 8; ++k) g[k] = keep[k] ? g[k] * scale : 0.0f;
      // The column sums add what is stored (rounded to T).
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        store_bf16x8(dx + i, g, sums);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) sums[k] = rounded<T>(g[k]);
        store_pack<T, 8>(dx + i, g);
      }
    } else if constexpr (VEC == 4) {
      float g[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) g[k] = in.dy[k];
      bool keep[4];
      dropout_keep<4>(seed, base, static_cast<uint64_t>(i), p, keep);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        g[k] = keep[k] ? g[k] * scale : 0.0f;
        sums[k] = rounded<T>(g[k]);
      }
      store4(dx, i, n, g);
    } else {
      const float g = philox::dropout_uniform(seed, base, static_cast<uint64_t>(i)) >= p ? in.dy[0] * scale : 0.0f;
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
    const int64_t cols = x.size(-1);
    const void* b = bias.defined() ? bias.data_ptr() : nullptr;
    const void* res = residual.defined() ? residual.data_ptr() : nullptr;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (cols % 8 == 0 && packable<T>(cols, {x.data_ptr(), b, res, out.data_ptr()})) {
        launch_map<8>(DropoutForwardRows8<T>{x.data<T>(), static_cast<const T*>(b), static_cast<const T*>(res),
                                             out.data<T>(), cols, seed, offset.data<int64_t>(), static_cast<float>(p),
                                             static_cast<float>(1.0 / (1.0 - p))},
                      n / cols, cols);
        return;
      }
    }
    DropoutForward<T> op{x.data<T>(),
                         bias.defined() ? bias.data<T>() : nullptr,
                         residual.defined() ? residual.data<T>() : nullptr,
                         out.data<T>(),
                         n,
                         x.size(-1),
                         seed,
                         offset.data<int64_t>(),
                         static_cast<float>(p),
                         static_cast<float>(1.0 / (1.0 - p)),
                         x.size(-1) % 4 == 0};
    if (op.by_rows) launch_map<4>(op, n / x.size(-1), x.size(-1));
    else launch_map<4>(op, 1, (n + 3) / 4 * 4);
  });
}

void dropout_backward(const Tensor& dy, double p, uint64_t seed, const Tensor& offset, const Tensor& dx,
                      const Tensor& dbias) {
  const int64_t n = dy.numel(), cols = dy.size(-1), rows = n / cols;
  const float pf = static_cast<float>(p), scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch_half_float(dy.dtype(), "dropout backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // 16-byte packs, one Philox call each
      if (cols % 8 == 0 && packable<T>(cols, {dy.data_ptr(), dx.data_ptr()})) {
        const DropoutBackward<T, 8> op{dy.data<T>(), dx.data<T>(), n, cols, seed, offset.data<int64_t>(), pf, scale};
        if (dbias.defined()) launch_map_reduce_columns<8, T>(op, rows, cols, dbias.data<T>());
        else launch_map<8>(op, rows, cols);
        return;
      }
    }
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
