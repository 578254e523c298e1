// Primitive elementwise kernels: one kernel per op, the unfused building blocks, each as good as
// an eager framework's: contiguous operands move through 16-byte vector accesses, broadcast ones
// index in 32-bit arithmetic without hardware division (BroadcastIndex32). The per-element
// formulas come from lib/elementwise_math.h, shared with the CPU loops.
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/elementwise/elementwise_cuda.h"

namespace ft::cuda {

namespace {

// Contiguous operands (each either the output's shape or a single element) run V elements a
// thread through 16-byte vector accesses; the arithmetic is `fn` on each element's values.
// A is the arithmetic type: f64 when any side is f64, else f32.
template <class In, class Out>
using mixed_acc_t = std::conditional_t<std::is_same_v<In, double> || std::is_same_v<Out, double>, double, float>;

template <class In, int NIN>
struct ContiguousInputs {
  const In* ptr[NIN];
  bool single[NIN];  // one element, broadcast to every output
};

template <class In, class Out, int V, int NIN, class Fn>
__global__ void contiguous_kernel(ContiguousInputs<In, NIN> in, Out* out, int64_t n, Fn fn) {
  begin_dependent_kernel();
  using A = mixed_acc_t<In, Out>;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  auto element = [&](int64_t i, int k) { return static_cast<A>(to_acc(in.ptr[k][in.single[k] ? 0 : i])); };
  for (int64_t p = first; p < n / V; p += stride) {
    A values[NIN][V];
#pragma unroll
    for (int k = 0; k < NIN; ++k) {
      if (in.single[k]) {
#pragma unroll
        for (int j = 0; j < V; ++j) values[k][j] = element(0, k);
      } else {
        const Pack<In, V> pack = *reinterpret_cast<const Pack<In, V>*>(in.ptr[k] + p * V);
#pragma unroll
        for (int j = 0; j < V; ++j) values[k][j] = static_cast<A>(to_acc(pack.v[j]));
      }
    }
    Pack<Out, V> result;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A x[NIN];
#pragma unroll
      for (int k = 0; k < NIN; ++k) x[k] = values[k][j];
      result.v[j] = from_acc<Out>(fn(x));
    }
    *reinterpret_cast<Pack<Out, V>*>(out + p * V) = result;
  }
  for (int64_t i = n / V * V + first; i < n; i += stride) {  // the last n % V elements
    A x[NIN];
#pragma unroll
    for (int k = 0; k < NIN; ++k) x[k] = element(i, k);
    out[i] = from_acc<Out>(fn(x));
  }
}

template <class A>
struct UnaryFn {
  UnaryOp op;
  A p, q;
  __device__ A operator()(const A (&x)[1]) const { return apply_unary<A>(op, x[0], p, q); }
};
template <class A>
struct BinaryFn {
  BinaryOp op;
  __device__ A operator()(const A (&x)[2]) const { return apply_binary(op, x[0], x[1]); }
};
template <class A>
struct IdentityFn {
  __device__ A operator()(const A (&x)[1]) const { return x[0]; }
};

/// Launches contiguous_kernel with 16-byte packs when every pointer allows them, else one
/// element at a time.
template <class In, class Out, int NIN, class Fn>
void launch_contiguous(const ContiguousInputs<In, NIN>& in, Out* out, int64_t n, const Fn& fn) {
  constexpr int V = 16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
  bool packed = reinterpret_cast<uintptr_t>(out) % (sizeof(Out) * V) == 0;
  for (int k = 0; k < NIN; ++k)
    packed = packed && (in.single[k] || reinterpret_cast<uintptr_t>(in.ptr[k]) % (sizeof(In) * V) == 0);
  if (packed)
    launch_dependent(contiguous_kernel<In, Out, V, NIN, Fn>, elementwise_blocks((n + V - 1) / V, kThreads), kThreads, 0,
                     in, out, n, fn);
  else
    launch_dependent(contiguous_kernel<In, Out, 1, NIN, Fn>, elementwise_blocks(n, kThreads), kThreads, 0, in, out, n,
                     fn);
}

// Broadcast operands: body(i, index) for every output element i, index[k] being operand k's
// element. Outputs under 2^31 elements take 32-bit indices (BroadcastIndex32) and kUnroll
// elements a thread, block-strided so that neighbouring threads touch neighbouring elements;
// larger ones walk the plan's 64-bit indices.
constexpr int kUnroll = 4;

template <int N, class Body>
__global__ void broadcast_kernel32(uint32_t n, BroadcastIndex32<N> map, Body body) {
  begin_dependent_kernel();
  const uint32_t first = blockIdx.x * (blockDim.x * kUnroll) + threadIdx.x;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = first + u * blockDim.x;
    if (i < n) {
      uint32_t index[N];
      map(i, index);
      body(i, index);
    }
  }
}

template <int N, class Body>
__global__ void broadcast_kernel64(int64_t n, BroadcastPlan plan, Body body) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t index[N];
#pragma unroll
    for (int k = 0; k < N; ++k) index[k] = plan.operand_index(k, i);
    body(i, index);
  }
}

// When the innermost dim is a multiple of V and every operand walks it contiguously or not at
// all (a bias row, a row statistic [N, 1], a mask [T, T] over [B, NH, T, T]), each thread takes
// V neighbouring outputs: one index computation, vector accesses for the contiguous operands,
// one load for the broadcast ones.
template <int N, int V, class Body>
__global__ void broadcast_vector_kernel(uint32_t packs, BroadcastIndex32<N> map, Body body) {
  begin_dependent_kernel();
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += gridDim.x * blockDim.x) {
    uint32_t index[N];
    map(p * V, index);
    body.template pack<V>(p * V, index);
  }
}

/// Whether the innermost dim allows V-element packs: its size a multiple of V, each operand's
/// stride there 0 or 1, and each pointer read or written in packs aligned to a pack.
template <int N>
bool inner_packs(const BroadcastPlan& plan, int vec, std::initializer_list<std::pair<const void*, size_t>> operands,
                 const void* out, size_t out_element) {
  if (plan.ndim == 0 || plan.size[plan.ndim - 1] % vec != 0) return false;
  if (reinterpret_cast<uintptr_t>(out) % (out_element * vec) != 0) return false;
  int k = 0;
  for (const auto& [pointer, element] : operands) {
    const int64_t stride = plan.stride[k++][plan.ndim - 1];
    if (stride > 1) return false;
    if (stride == 1 && reinterpret_cast<uintptr_t>(pointer) % (element * vec) != 0) return false;
  }
  return true;
}

template <int N, class Body>
void launch_broadcast(int64_t n, const BroadcastPlan& plan, const Body& body, bool packed = false) {
  constexpr int V = Body::kPack;
  if constexpr (V > 1) {  // bodies that never pack (comparisons) have no vector path
    if (packed && BroadcastIndex32<N>::fits(n)) {
      const int64_t packs = n / V;
      launch_dependent(broadcast_vector_kernel<N, V, Body>, elementwise_blocks(packs, kThreads), kThreads, 0,
                       static_cast<uint32_t>(packs), BroadcastIndex32<N>(plan), body);
      return;
    }
  }
  if (BroadcastIndex32<N>::fits(n)) {
    const unsigned blocks = static_cast<unsigned>((n + kThreads * kUnroll - 1) / (kThreads * kUnroll));
    launch_dependent(broadcast_kernel32<N, Body>, blocks, kThreads, 0, static_cast<uint32_t>(n),
                     BroadcastIndex32<N>(plan), body);
  } else {
    launch_dependent(broadcast_kernel64<N, Body>, elementwise_blocks(n, kThreads), kThreads, 0, n, plan, body);
  }
}

/// Whether a (coalesced) plan reads each operand contiguously or as one element.
bool contiguous_or_single(const BroadcastPlan& plan, int operands) {
  if (plan.ndim > 1) return false;
  for (int k = 0; k < operands; ++k)
    if (plan.ndim == 1 && plan.stride[k][0] > 1) return false;
  return true;
}

/// V elements from p as a pack, or p[0] V times when the operand is broadcast along the pack.
template <class T, int V>
__device__ __forceinline__ Pack<T, V> load_or_splat(const T* p, bool splat) {
  if (!splat) return *reinterpret_cast<const Pack<T, V>*>(p);
  Pack<T, V> pack;
#pragma unroll
  for (int j = 0; j < V; ++j) pack.v[j] = p[0];
  return pack;
}

template <class T>
struct BinaryBody {
  static constexpr int kPack = 16 / sizeof(T);
  BinaryOp op;
  const T *a, *b;
  T* out;
  bool splat_a = false, splat_b = false;  // broadcast along the innermost dim (the vector path)
  template <class I>
  __device__ void operator()(I i, const I (&index)[2]) const {
    out[i] = from_acc<T>(apply_binary(op, to_acc(a[index[0]]), to_acc(b[index[1]])));
  }
  template <int V>
  __device__ void pack(uint32_t i, const uint32_t (&index)[2]) const {
    const Pack<T, V> pa = load_or_splat<T, V>(a + index[0], splat_a), pb = load_or_splat<T, V>(b + index[1], splat_b);
    Pack<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_acc<T>(apply_binary(op, to_acc(pa.v[j]), to_acc(pb.v[j])));
    *reinterpret_cast<Pack<T, V>*>(out + i) = r;
  }
};

// Comparisons take any dtype, read as double (they build masks, off the hot path).
struct CompareBody {
  static constexpr int kPack = 1;  // never packed: masks are built once, off the hot path
  CompareOp op;
  const void *a, *b;
  DType dtype;
  uint8_t* out;
  template <class I>
  __device__ void operator()(I i, const I (&index)[2]) const {
    out[i] = apply_compare(op, load_any(a, dtype, index[0]), load_any(b, dtype, index[1]));
  }
};

// where moves elements unchanged, so only their width matters.
template <class Word>
struct WhereBody {
  static constexpr int kPack = 16 / sizeof(Word);
  const uint8_t* cond;
  const Word *a, *b;
  Word* out;
  bool splat[3] = {false, false, false};  // broadcast along the innermost dim (the vector path)
  template <class I>
  __device__ void operator()(I i, const I (&index)[3]) const {
    out[i] = cond[index[0]] ? a[index[1]] : b[index[2]];
  }
  template <int V>
  __device__ void pack(uint32_t i, const uint32_t (&index)[3]) const {
    const Pack<uint8_t, V> pc = load_or_splat<uint8_t, V>(cond + index[0], splat[0]);
    const Pack<Word, V> pa = load_or_splat<Word, V>(a + index[1], splat[1]), pb = load_or_splat<Word, V>(b + index[2], splat[2]);
    Pack<Word, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = pc.v[j] ? pa.v[j] : pb.v[j];
    *reinterpret_cast<Pack<Word, V>*>(out + i) = r;
  }
};

__global__ void cast_any_kernel(const void* x, DType from, void* out, DType to, int64_t n) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, to, i, load_any(x, from, i));
}

// Gradient accumulation into f32 views: 4 elements a thread, the source converted as read.
template <class S>
__global__ void accumulate_kernel(const S* src, float* dst, int64_t n, bool overwrite, const float* scale) {
  begin_dependent_kernel();
  const float factor = scale ? *scale : 1.0f;
  const int64_t packs = n / 4, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < packs; q += stride) {
    float s[4], d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_pack<S, 4>(src + 4 * q, s);
    if (!overwrite) load_pack<float, 4>(dst + 4 * q, d);
#pragma unroll
    for (int k = 0; k < 4; ++k) d[k] += s[k] * factor;
    store_pack<float, 4>(dst + 4 * q, d);
  }
  for (int64_t i = 4 * packs + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = (overwrite ? 0.0f : dst[i]) + to_acc(src[i]) * factor;
}

// Any other pairing (f64 destinations, unaligned views): element by element.
__global__ void accumulate_any_kernel(const void* src, DType from, void* dst, DType to, int64_t n, bool overwrite,
                                      const float* scale) {
  begin_dependent_kernel();
  const double factor = scale ? *scale : 1.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if (to == DType::F32) {  // f32 arithmetic, as the packed kernel does
      float* d = static_cast<float*>(dst);
      d[i] = (overwrite ? 0.0f : d[i]) + static_cast<float>(load_any(src, from, i)) * static_cast<float>(factor);
    } else {
      store_any(dst, to, i, (overwrite ? 0.0 : load_any(dst, to, i)) + load_any(src, from, i) * factor);
    }
  }
}

__global__ void fill_kernel(void* out, DType dtype, int64_t n, double value, bool arange) {
  begin_dependent_kernel();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, dtype, i, arange ? static_cast<double>(i) : value);
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double p, double q) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_floating(x.dtype(), "unary op", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    launch_contiguous<T, T, 1>({{x.data<T>()}, {false}}, out.data<T>(), n,
                               UnaryFn<A>{op, static_cast<A>(p), static_cast<A>(q)});
  });
  FT_CUDA_CHECK_LAUNCH("unary contiguous_kernel");
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(a.dtype(), "binary op", [&](auto tag) {
    using T = decltype(tag);
    if (contiguous_or_single(plan, 2)) {
      const bool single_a = a.numel() == 1 && n > 1, single_b = b.numel() == 1 && n > 1;
      launch_contiguous<T, T, 2>({{a.data<T>(), b.data<T>()}, {single_a, single_b}}, out.data<T>(), n,
                                 BinaryFn<acc_t<T>>{op});
    } else {
      BinaryBody<T> body{op, a.data<T>(), b.data<T>(), out.data<T>()};
      const bool packed = inner_packs<2>(plan, BinaryBody<T>::kPack, {{a.data_ptr(), sizeof(T)}, {b.data_ptr(), sizeof(T)}},
                                         out.data_ptr(), sizeof(T));
      if (packed) {
        body.splat_a = plan.stride[0][plan.ndim - 1] == 0;
        body.splat_b = plan.stride[1][plan.ndim - 1] == 0;
      }
      launch_broadcast<2>(n, plan, body, packed);
    }
  });
  FT_CUDA_CHECK_LAUNCH("binary kernel");
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch_broadcast<2>(n, plan, CompareBody{op, a.data_ptr(), b.data_ptr(), a.dtype(), out.data<uint8_t>()});
  FT_CUDA_CHECK_LAUNCH("compare kernel");
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_word(a.dtype(), [&](auto word) {
    using Word = decltype(word);
    WhereBody<Word> body{cond.data<uint8_t>(), static_cast<const Word*>(a.data_ptr()),
                         static_cast<const Word*>(b.data_ptr()), static_cast<Word*>(out.data_ptr())};
    const bool packed = inner_packs<3>(plan, WhereBody<Word>::kPack,
                                       {{cond.data_ptr(), 1}, {a.data_ptr(), sizeof(Word)}, {b.data_ptr(), sizeof(Word)}},
                                       out.data_ptr(), sizeof(Word));
    if (packed)
      for (int k = 0; k < 3; ++k) body.splat[k] = plan.stride[k][plan.ndim - 1] == 0;
    launch_broadcast<3>(n, plan, body, packed);
  });
  FT_CUDA_CHECK_LAUNCH("where kernel");
}

void cast(const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (is_floating(x.dtype()) && is_floating(out.dtype())) {
    // Between floating dtypes (the casts a bf16 model makes): typed, with vector accesses.
    dispatch_floating(x.dtype(), "cast", [&](auto from_tag) {
      using From = decltype(from_tag);
      dispatch_floating(out.dtype(), "cast", [&](auto to_tag) {
        using To = decltype(to_tag);
        launch_contiguous<From, To, 1>({{x.data<From>()}, {false}}, out.data<To>(), n, IdentityFn<mixed_acc_t<From, To>>{});
      });
    });
  } else {
    launch_dependent(cast_any_kernel, elementwise_blocks(n, kThreads), kThreads, 0, x.data_ptr(), x.dtype(),
                     out.data_ptr(), out.dtype(), n);
  }
  FT_CUDA_CHECK_LAUNCH("cast kernel");
}

void accumulate(const Tensor& src, const Tensor& dst, bool overwrite, const Tensor& scale) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const float* factor = scale.defined() ? scale.data<float>() : nullptr;
  const auto aligned = [](const Tensor& t, size_t bytes) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0; };
  const bool packed = dst.dtype() == DType::F32 && aligned(dst, 16) &&
                      ((src.dtype() == DType::F32 && aligned(src, 16)) || (src.dtype() == DType::BF16 && aligned(src, 8)));
  const unsigned blocks = elementwise_blocks((n + 3) / 4, kThreads);
  if (packed && src.dtype() == DType::BF16) {
    launch_dependent(accumulate_kernel<__nv_bfloat16>, blocks, kThreads, 0, src.data<__nv_bfloat16>(),
                     dst.data<float>(), n, overwrite, factor);
  } else if (packed) {
    launch_dependent(accumulate_kernel<float>, blocks, kThreads, 0, src.data<float>(), dst.data<float>(), n, overwrite,
                     factor);
  } else {
    launch_dependent(accumulate_any_kernel, elementwise_blocks(n, kThreads), kThreads, 0, src.data_ptr(), src.dtype(),
                     dst.data_ptr(), dst.dtype(), n, overwrite, factor);
  }
  FT_CUDA_CHECK_LAUNCH("accumulate_kernel");
}

void fill(const Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch_dependent(fill_kernel, elementwise_blocks(n, kThreads), kThreads, 0, out.data_ptr(), out.dtype(), n, value,
                   false);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

void arange(const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch_dependent(fill_kernel, elementwise_blocks(n, kThreads), kThreads, 0, out.data_ptr(), out.dtype(), n, 0.0,
                   true);
  FT_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace ft::cuda
