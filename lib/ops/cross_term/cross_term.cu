// Fused cross_term: one map over [B, W] forward (x0 ⊙ (y + bias) + x in f32 registers, written
// once), and one backward map that writes d x0 and d y and sums d y down the columns into d bias
// in the same pass (row_map.cuh). Replaces the twin's add, mul and add forward (two [B, W]
// intermediates) and its two muls and column sum backward.
#include "lib/cuda/row_map.cuh"
#include "lib/ops/cross_term/cross_term_cuda.h"

namespace ft::cuda {

namespace {

template <class T, int VEC>
struct CrossForward {
  const T* x0;
  const T* y;
  const T* bias;
  const T* x;
  T* out;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&)[VEC]) const {
    float a[VEC], b[VEC], v[VEC], s[VEC];
    load_pack<T, VEC>(x0 + r * cols + c, a);
    load_pack<T, VEC>(y + r * cols + c, v);
    load_pack<T, VEC>(bias + c, b);
    load_pack<T, VEC>(x + r * cols + c, s);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s[k] += a[k] * (v[k] + b[k]);
    store_pack<T, VEC>(out + r * cols + c, s);
  }
};

template <class T, int VEC>
struct CrossBackward {
  const T* g;
  const T* x0;
  const T* y;
  const T* bias;
  T* dx0;
  T* dy;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&sums)[VEC]) const {
    float gv[VEC], a[VEC], v[VEC], b[VEC], da[VEC];
    load_pack<T, VEC>(g + r * cols + c, gv);
    load_pack<T, VEC>(x0 + r * cols + c, a);
    load_pack<T, VEC>(y + r * cols + c, v);
    load_pack<T, VEC>(bias + c, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      da[k] = gv[k] * (v[k] + b[k]);
      sums[k] = gv[k] * a[k];
    }
    store_pack<T, VEC>(dx0 + r * cols + c, da);
    store_pack<T, VEC>(dy + r * cols + c, sums);
  }
};

}  // namespace

void cross_term_forward(const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& x, const Tensor& out) {
  const int64_t rows = x0.size(0), cols = x0.size(1);
  with_vector_width(x0.dtype(), "cross_term", cols,
                    {x0.data_ptr(), y.data_ptr(), bias.data_ptr(), x.data_ptr(), out.data_ptr()},
                    [&](auto tag, auto vec) {
                      using T = decltype(tag);
                      constexpr int V = decltype(vec)::value;
                      launch_map<V>(CrossForward<T, V>{x0.data<T>(), y.data<T>(), bias.data<T>(), x.data<T>(),
                                                       out.data<T>(), cols},
                                    rows, cols);
                    });
}

void cross_term_backward(const Tensor& g, const Tensor& x0, const Tensor& y, const Tensor& bias, const Tensor& dx0,
                         const Tensor& dy, const GradOutput& dbias) {
  const int64_t rows = x0.size(0), cols = x0.size(1);
  with_vector_width(x0.dtype(), "cross_term backward", cols,
                    {g.data_ptr(), x0.data_ptr(), y.data_ptr(), bias.data_ptr(), dx0.data_ptr(), dy.data_ptr()},
                    [&](auto tag, auto vec) {
                      using T = decltype(tag);
                      constexpr int V = decltype(vec)::value;
                      const CrossBackward<T, V> op{g.data<T>(),   x0.data<T>(), y.data<T>(), bias.data<T>(),
                                                   dx0.data<T>(), dy.data<T>(), cols};
                      launch_map_reduce_columns<V, T>(op, rows, cols, grad_sink<T>(dbias));
                    });
}

}  // namespace ft::cuda
