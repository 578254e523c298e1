// Primitive elementwise kernels: one kernel per op, the unfused building blocks, each as good as
// an eager framework's: contiguous operands move through 16-byte vector accesses, broadcast ones
// index in 32-bit arithmetic without hardware division (BroadcastIndex32). The per-element
// formulas come from lib/elementwise_math.h, shared with the CPU loops.
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "lib/cuda/contiguous.cuh"
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "lib/ops/elementwise/elementwise_cuda.h"

namespace ft::cuda {

namespace {

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

}  // namespace ft::cuda
