// Softmax and log-softmax over the last dim, one block a row. Forward reads the row twice: once
// for its running maximum and the sum of exponentials (each thread keeps both online, then the
// block merges them), once more (from L2 for rows of a few KB) to write y. Backward reads y and
// dy twice the same way: once for Σ dy·y (Σ dy for log-softmax), once to write dx. Vector
// accesses of 4 elements when the rows allow them. Arithmetic in f32 (f64 for f64).
#include <cmath>
#include <type_traits>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/softmax/softmax_cuda.h"

namespace ft::cuda {

namespace {

template <class T>
using arith_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

/// A running maximum m and Σ exp(x − m) over the elements seen so far.
template <class A>
struct MaxSum {
  A m, s;
};

template <class A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  if (m == A(-INFINITY)) return {m, A(0)};  // nothing but -inf so far: no mass yet
  return {m, a.s * exp_of(a.m - m) + b.s * exp_of(b.m - m)};
}

template <class A>
__device__ __forceinline__ void add_element(MaxSum<A>& r, A v) {
  if (v > r.m) {
    r.s = r.s * exp_of(r.m - v) + A(1);
    r.m = v;
  } else if (r.m != A(-INFINITY)) {
    r.s += exp_of(v - r.m);  // a NaN v makes the sum NaN, as it should
  }
}

/// Merges every thread's value over the block; every thread gets the result.
template <class A, class Value, class Merge>
__device__ Value block_merge(Value v, Merge merge_two, Value* scratch) {
#pragma unroll
  for (int shift = 16; shift > 0; shift >>= 1) {
    Value other;
    if constexpr (std::is_same_v<Value, MaxSum<A>>) {
      other = {__shfl_xor_sync(0xffffffffu, v.m, shift), __shfl_xor_sync(0xffffffffu, v.s, shift)};
    } else {
      other = __shfl_xor_sync(0xffffffffu, v, shift);
    }
    v = merge_two(v, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = merge_two(v, scratch[w]);  // the same order in every thread
  return v;
}

template <class T, int V, class A>
__device__ __forceinline__ void load_row(const T* p, A (&v)[V]) {
  if constexpr (V > 1) {
    const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = static_cast<A>(to_acc(pack.v[j]));
  } else {
    v[0] = static_cast<A>(to_acc(*p));
  }
}

template <class T, int V, class A>
__device__ __forceinline__ void store_row(T* p, const A (&v)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int j = 0; j < V; ++j) pack.v[j] = from_acc<T>(v[j]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

template <class In, class Out, int V>
__global__ void softmax_forward_kernel(const In* x, Out* y, int64_t cols, bool log) {
  begin_dependent_kernel();
  using A = arith_t<In>;
  __shared__ MaxSum<A> scratch[32];
  const In* row = x + blockIdx.x * cols;
  Out* out = y + blockIdx.x * cols;
  MaxSum<A> r{A(-INFINITY), A(0)};
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    A v[V];
    load_row<In, V>(row + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) add_element(r, v[j]);
  }
  r = block_merge<A>(r, [](MaxSum<A> a, MaxSum<A> b) { return merge(a, b); }, scratch);
  const A log_sum = log_of(r.s), inv_sum = A(1) / r.s;
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    A v[V];
    load_row<In, V>(row + c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = log ? v[j] - r.m - log_sum : exp_of(v[j] - r.m) * inv_sum;
    store_row<Out, V>(out + c, v);
  }
}

template <class In, class Out, int V>
__global__ void softmax_backward_kernel(const Out* y, const Out* dy, In* dx, int64_t cols, bool log) {
  begin_dependent_kernel();
  using A = arith_t<In>;
  __shared__ A scratch[32];
  const int64_t base = blockIdx.x * cols;
  A s = 0;
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    A yv[V], g[V];
    load_row<Out, V>(dy + base + c, g);
    if (!log) load_row<Out, V>(y + base + c, yv);
#pragma unroll
    for (int j = 0; j < V; ++j) s += log ? g[j] : g[j] * yv[j];
  }
  s = block_merge<A>(s, [](A a, A b) { return a + b; }, scratch);
  for (int64_t c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
    A yv[V], g[V];
    load_row<Out, V>(dy + base + c, g);
    load_row<Out, V>(y + base + c, yv);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = log ? g[j] - exp_of(yv[j]) * s : yv[j] * (g[j] - s);
    store_row<In, V>(dx + base + c, g);
  }
}

/// Calls f(In{}, Out{}) for the dtype pairs softmax takes: (f32, f32), (bf16, bf16), (bf16, f32),
/// (f64, f64).
template <class F>
void dispatch_pair(DType in, DType out, F&& f) {
  if (in == DType::F32) return f(float{}, float{});
  if (in == DType::F64) return f(double{}, double{});
  FT_CHECK(in == DType::BF16, "softmax: expected a floating dtype, got ", dtype_name(in));
  if (out == DType::F32) return f(__nv_bfloat16{}, float{});
  return f(__nv_bfloat16{}, __nv_bfloat16{});
}

/// 4-element packs when the row length and every pointer allow them; never for f64 (a pack of
/// four would need 32-byte alignment, and f64 is the reference dtype, not a fast one).
template <class In>
constexpr bool kPacks = !std::is_same_v<In, double>;
bool rows_packable(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % 4 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

/// Runs launch(integral_constant<int, V>) with 4-element packs when the dtype and rows allow
/// them, else one element at a time.
template <class In, class Launch>
void launch_packed_or_not(int64_t cols, std::initializer_list<const void*> pointers, const Launch& launch) {
  if constexpr (kPacks<In>) {
    if (rows_packable(cols, pointers)) return launch(std::integral_constant<int, 4>{});
  }
  launch(std::integral_constant<int, 1>{});
}

/// Enough threads for one pack each on rows up to 4096 elements, at least a warp.
int row_threads(int64_t cols, int vec) {
  const int64_t per_thread = (cols + vec - 1) / vec;
  return static_cast<int>(per_thread >= 1024 ? 1024 : (per_thread + 31) / 32 * 32);
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, bool log) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  FT_CHECK(rows <= 2147483647LL, "softmax: too many rows (", rows, ")");
  dispatch_pair(x.dtype(), y.dtype(), [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* px = static_cast<const In*>(x.data_ptr());
    Out* py = static_cast<Out*>(y.data_ptr());
    const auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      launch_dependent(softmax_forward_kernel<In, Out, V>, static_cast<unsigned>(rows), row_threads(cols, V), 0, px, py,
                       cols, log);
    };
    launch_packed_or_not<In>(cols, {px, py}, launch);
  });
  FT_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  const int64_t cols = y.size(-1), rows = y.numel() / cols;
  FT_CHECK(rows <= 2147483647LL, "softmax backward: too many rows (", rows, ")");
  dispatch_pair(dx.dtype(), y.dtype(), [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const Out* py = static_cast<const Out*>(y.data_ptr());
    const Out* pg = static_cast<const Out*>(dy.data_ptr());
    In* pdx = static_cast<In*>(dx.data_ptr());
    const auto launch = [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      launch_dependent(softmax_backward_kernel<In, Out, V>, static_cast<unsigned>(rows), row_threads(cols, V), 0, py,
                       pg, pdx, cols, log);
    };
    launch_packed_or_not<In>(cols, {py, pg, pdx}, launch);
  });
  FT_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace ft::cuda
