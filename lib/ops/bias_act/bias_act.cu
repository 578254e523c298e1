// Fused bias + activation and SwiGLU. Forward: x (and the bias) read once, y written once, the
// pre-activation never stored. Backward: one kernel recomputes x + bias, writes dx and sums db
// down the columns (lib/cuda/row_map.cuh). Replaces the twin's add, activation primitives and,
// backward, their chain of gradient kernels and the bias sum_to.
#include "lib/cuda/row_map.cuh"
#include "lib/ops/bias_act/bias_act_cuda.h"

namespace ft::cuda {

namespace {

template <class T, int VEC>
struct BiasActForward {
  const T* x;
  const T* bias;
  T* y;
  int64_t cols;
  Activation act;
  __device__ void operator()(int64_t r, int64_t c, float (&)[VEC]) const {
    float v[VEC], b[VEC] = {};
    load_pack<T, VEC>(x + r * cols + c, v);
    if (bias) load_pack<T, VEC>(bias + c, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = activate(act, v[k] + b[k], kFastMath<T>);
    store_pack<T, VEC>(y + r * cols + c, v);
  }
};

template <class T, int VEC>
struct BiasActBackward {
  const T* dy;
  const T* x;
  const T* bias;
  T* dx;
  int64_t cols;
  Activation act;
  __device__ void operator()(int64_t r, int64_t c, float (&sums)[VEC]) const {
    float g[VEC], v[VEC], b[VEC] = {};
    load_pack<T, VEC>(dy + r * cols + c, g);
    load_pack<T, VEC>(x + r * cols + c, v);
    if (bias) load_pack<T, VEC>(bias + c, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      g[k] *= activate_grad(act, v[k] + b[k], kFastMath<T>);
      sums[k] = rounded<T>(g[k]);  // db sums the dx values as stored
    }
    store_pack<T, VEC>(dx + r * cols + c, g);
  }
};

template <class T, int VEC>
struct SwigluForward {
  const T* a;
  const T* b;
  T* y;
  int64_t in_stride, width;
  __device__ void operator()(int64_t r, int64_t c, float (&)[VEC]) const {
    float va[VEC], vb[VEC];
    load_pack<T, VEC>(a + r * in_stride + c, va);
    load_pack<T, VEC>(b + r * in_stride + c, vb);
#pragma unroll
    for (int k = 0; k < VEC; ++k) va[k] = silu(va[k]) * vb[k];
    store_pack<T, VEC>(y + r * width + c, va);
  }
};

template <class T, int VEC>
struct SwigluBackward {
  const T* dy;
  const T* a;
  const T* b;
  T* da;
  T* db;
  int64_t in_stride, width;
  __device__ void operator()(int64_t r, int64_t c, float (&)[VEC]) const {
    float g[VEC], va[VEC], vb[VEC], ga[VEC], gb[VEC];
    load_pack<T, VEC>(dy + r * width + c, g);
    load_pack<T, VEC>(a + r * in_stride + c, va);
    load_pack<T, VEC>(b + r * in_stride + c, vb);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      ga[k] = g[k] * vb[k] * silu_grad(va[k]);
      gb[k] = g[k] * silu(va[k]);
    }
    store_pack<T, VEC>(da + r * in_stride + c, ga);
    store_pack<T, VEC>(db + r * in_stride + c, gb);
  }
};

}  // namespace

void bias_act_forward(const Tensor& x, const Tensor& bias, Activation act, const Tensor& y) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const void* b = bias.defined() ? bias.data_ptr() : nullptr;
  with_vector_width(x.dtype(), "bias_act", cols, {x.data_ptr(), b, y.data_ptr()}, [&](auto tag, auto vec) {
    using T = decltype(tag);
    constexpr int V = decltype(vec)::value;
    launch_map<V>(BiasActForward<T, V>{x.data<T>(), static_cast<const T*>(b), y.data<T>(), cols, act}, rows, cols);
  });
}

void bias_act_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Activation act, const Tensor& dx,
                       const GradOutput& dbias) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const void* b = bias.defined() ? bias.data_ptr() : nullptr;
  with_vector_width(x.dtype(), "bias_act backward", cols, {dy.data_ptr(), x.data_ptr(), b, dx.data_ptr()},
                    [&](auto tag, auto vec) {
                      using T = decltype(tag);
                      constexpr int V = decltype(vec)::value;
                      BiasActBackward<T, V> op{dy.data<T>(), x.data<T>(), static_cast<const T*>(b), dx.data<T>(),
                                               cols, act};
                      launch_map_reduce_columns<V, T>(op, rows, cols, grad_sink<T>(dbias));
                    });
}

void swiglu_forward(const Tensor& a, const Tensor& b, int64_t b_offset, int64_t rows, int64_t width,
                    int64_t in_stride, const Tensor& y) {
  with_vector_width(y.dtype(), "swiglu", width, {a.data_ptr(), y.data_ptr()}, [&](auto tag, auto vec) {
    using T = decltype(tag);
    const T* pb = b.data<T>() + b_offset;
    auto run = [&](auto width_tag) {
      constexpr int V = decltype(width_tag)::value;
      launch_map<V>(SwigluForward<T, V>{a.data<T>(), pb, y.data<T>(), in_stride, width}, rows, width);
    };
    if (decltype(vec)::value > 1 && packable<T>(in_stride, {pb})) run(vec);
    else run(std::integral_constant<int, 1>{});
  });
}

void swiglu_backward(const Tensor& dy, const Tensor& a, const Tensor& b, int64_t b_offset, int64_t rows,
                     int64_t width, int64_t in_stride, const Tensor& da, const Tensor& db) {
  with_vector_width(dy.dtype(), "swiglu backward", width, {dy.data_ptr(), a.data_ptr(), da.data_ptr()},
                    [&](auto tag, auto vec) {
                      using T = decltype(tag);
                      const T* pb = b.data<T>() + b_offset;
                      T* pdb = db.data<T>() + b_offset;
                      auto run = [&](auto width_tag) {
                        constexpr int V = decltype(width_tag)::value;
                        launch_map<V>(SwigluBackward<T, V>{dy.data<T>(), a.data<T>(), pb, da.data<T>(), pdb,
                                                           in_stride, width},
                                      rows, width);
                      };
                      if (decltype(vec)::value > 1 && packable<T>(in_stride, {pb, pdb})) run(vec);
                      else run(std::integral_constant<int, 1>{});
                    });
}

}  // namespace ft::cuda
