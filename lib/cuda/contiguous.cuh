// Elementwise work over contiguous operands: V elements a thread through 16-byte vector accesses
// when every pointer allows them. The elementwise ops and the runtime's element kernels
// (conversions, gradient sums) both launch it, each with its own per-element function.
#pragma once
#include <cstdint>
#include <type_traits>

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

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

}  // namespace ft::cuda
