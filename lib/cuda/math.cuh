// Device helpers shared by the primitive kernels and the fused kernels: element conversion,
// dtype dispatch, activation formulas and Philox. No kernel body lives here.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "lib/cuda/mma.cuh"
#include "lib/dtype.h"
#include "lib/elementwise_math.h"
#include "lib/error.h"
#include "lib/philox.h"

namespace ft::cuda {

// Elements are computed in f32, except f64 in f64.
template <class T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <class T> using acc_t = typename AccOf<T>::type;

__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <class T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <class T> __device__ __forceinline__ T from_acc(double v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(double v) { return __double2bfloat16(v); }

/// v rounded to T and back: what a value is once stored (reductions of stored values use it).
template <class T>
__device__ __forceinline__ float rounded(float v) {
  return to_acc(from_acc<T>(v));
}

/// Reads element i of any dtype as a double (casts and comparisons, where speed is secondary).
__device__ __forceinline__ double load_any(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0.0;
}

__device__ __forceinline__ void store_any(void* p, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}

/// Integer ids of either width, as int64.
__device__ __forceinline__ int64_t load_id(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

/// tanh: the hardware approximation (one MUFU op, relative error about 2^-11) when the result is
/// rounded to bf16 anyway (2^-8), the accurate tanhf otherwise. The formulas below take the
/// choice as `fast`, so f32 results keep f32 accuracy.
__device__ __forceinline__ float tanh_of(float x, bool fast) {
  if (!fast) return tanhf(x);
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// GELU, tanh form, and its derivative (the formulas of lib/elementwise_math.h).
struct TanhOf {
  bool fast;
  __device__ __forceinline__ float operator()(float v) const { return tanh_of(v, fast); }
};
__device__ __forceinline__ float gelu_tanh(float x, bool fast = false) { return gelu_tanh_of(x, TanhOf{fast}); }
__device__ __forceinline__ float gelu_tanh_grad(float x, bool fast = false) {
  return gelu_tanh_derivative(x, TanhOf{fast});
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * __expf(-0.5f * x * x);
}
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

/// act(x) and act'(x) for every Activation, in f32 (`fast`: see tanh_of).
__device__ __forceinline__ float activate(Activation act, float x, bool fast = false) {
  switch (act) {
    case Activation::ReLU: return x > 0.0f ? x : 0.0f;
    case Activation::GELU: return gelu_tanh(x, fast);
    case Activation::GELUErf: return gelu_erf(x);
    case Activation::SiLU: return silu(x);
    default: return x;
  }
}
__device__ __forceinline__ float activate_grad(Activation act, float x, bool fast = false) {
  switch (act) {
    case Activation::ReLU: return x > 0.0f ? 1.0f : 0.0f;
    case Activation::GELU: return gelu_tanh_grad(x, fast);
    case Activation::GELUErf: return gelu_erf_grad(x);
    case Activation::SiLU: return silu_grad(x);
    default: return 1.0f;
  }
}

/// Calls body(integral_constant<Activation, A>) with the runtime `act` as the compile-time A, for
/// loops over several elements: activate(A, ...) then folds its switch, and the elements' chains
/// interleave. With the switch per element, each element branched on its own and its formula ran
/// alone (the LayerNorm + GELU + Dropout backward: 84 instructions an element, latency-bound).
template <class Body>
__device__ __forceinline__ void with_activation(Activation act, Body&& body) {
  switch (act) {
    case Activation::ReLU: body(std::integral_constant<Activation, Activation::ReLU>{}); break;
    case Activation::GELU: body(std::integral_constant<Activation, Activation::GELU>{}); break;
    case Activation::GELUErf: body(std::integral_constant<Activation, Activation::GELUErf>{}); break;
    case Activation::SiLU: body(std::integral_constant<Activation, Activation::SiLU>{}); break;
    default: body(std::integral_constant<Activation, Activation::None>{}); break;
  }
}

/// Whether results of type T tolerate the fast approximations (bf16 does).
template <class T>
constexpr bool kFastMath = std::is_same_v<T, __nv_bfloat16>;

/// Dropout's keep bits for elements [i, i + V) of the draw keyed on (seed, offset): element j is
/// kept when philox::dropout_uniform(seed, offset, j) >= p, for p in [0, 1] (philox::keep_threshold).
/// One Philox call per 8 elements when V is a multiple of 8 and the first counter is one (packs
/// start at multiples of V, and PhiloxCounter reserves offsets in multiples of 8), half a call's
/// bits for a pack of 4 starting at a multiple of 4. The V / 8 calls sit in one branch-free block,
/// so the compiler interleaves their independent round chains; with a branch per call they ran
/// one after the other, and the dropout kernels waited on each round's multiply (about 13 cycles
/// a warp instruction on the H100).
template <int V>
__device__ __forceinline__ void dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p, bool (&keep)[V]) {
  const uint64_t counter = offset + i;
  if constexpr (V % 8 == 0) {
    if ((counter & 7) == 0) {
      const uint32_t threshold = philox::keep_threshold(p);
      philox::Uint4 bits[V / 8];
#pragma unroll
      for (int q = 0; q < V / 8; ++q) bits[q] = philox::block_bits(seed, (counter >> 3) + q);
#pragma unroll
      for (int k = 0; k < V; ++k) keep[k] = philox::half_word(bits[k / 8], k % 8) >= threshold;
      return;
    }
  } else if constexpr (V == 4) {
    if ((counter & 3) == 0) {
      const uint32_t threshold = philox::keep_threshold(p);
      const philox::Uint4 bits = philox::block_bits(seed, counter >> 3);
      const bool upper = (counter & 4) != 0;  // half-words 4..7 of the block
      const uint32_t first = upper ? bits.z : bits.x, second = upper ? bits.w : bits.y;
      keep[0] = (first & 0xffffu) >= threshold;
      keep[1] = (first >> 16) >= threshold;
      keep[2] = (second & 0xffffu) >= threshold;
      keep[3] = (second >> 16) >= threshold;
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) keep[k] = philox::dropout_uniform(seed, offset, i + k) >= p;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int shift = 16; shift > 0; shift >>= 1) v += __shfl_xor_sync(0xffffffffu, v, shift);
  return v;
}

/// Sum over the whole block (any multiple of 32 threads, up to 1024), returned to every thread.
/// `scratch` is 33 floats of shared memory; the call ends with a barrier, so it can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float total = warp_sum(lane < warps ? scratch[lane] : 0.0f);
    if (lane == 0) scratch[32] = total;
  }
  __syncthreads();
  const float total = scratch[32];
  __syncthreads();
  return total;
}

constexpr float kLog2e = 1.4426950408889634f;

/// 2^x by the SFU's ex2 (as __expf uses it): relative error about 2^-22, -inf gives 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// N elements moved as one vector access (16 bytes for 8 bf16 or 4 f32).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
constexpr int kPackSize = 16 / sizeof(T);

/// One bf16 of a word of two (the lower address in the low half) in f32: the high one is the word
/// with its low half cleared, one instruction where the bf16 conversion took two.
__device__ __forceinline__ float bf16_in_word(uint32_t word, bool high) {
  return __uint_as_float(high ? word & 0xffff0000u : word << 16);
}

/// lo and hi rounded to bf16 as one word (mma::pack_bf16: one cvt.rn.bf16x2), and set to the
/// rounded values.
__device__ __forceinline__ uint32_t round_bf16_pair(float& lo, float& hi) {
  const uint32_t word = mma::pack_bf16(lo, hi);
  lo = bf16_in_word(word, false);
  hi = bf16_in_word(word, true);
  return word;
}

/// Element k of a pack in f32; bf16 pairs are read as 32-bit words (bf16_in_word).
template <class T, int N>
__device__ __forceinline__ float element(const Pack<T, N>& pack, int k) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    uint32_t word;
    memcpy(&word, &pack.v[k & ~1], sizeof word);
    return bf16_in_word(word, k % 2);
  } else {
    return to_acc(pack.v[k]);
  }
}

/// Rounds v to T into pack, and v to the rounded values (what a tensor of T would hold), bf16
/// two at a time (round_bf16_pair).
template <class T, int N>
__device__ __forceinline__ void round_into_pack(float (&v)[N], Pack<T, N>& pack) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {
      const uint32_t word = round_bf16_pair(v[k], v[k + 1]);
      memcpy(&pack.v[k], &word, sizeof word);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      pack.v[k] = from_acc<T>(v[k]);
      v[k] = to_acc(pack.v[k]);
    }
  }
}

template <class T, int N>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[N]) {
  const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = element(pack, k);
}
/// Eight floats rounded to bf16 and stored as one 16-byte access; `stored` gets the rounded
/// values. Written as a pack (or a uint4) the compiler split the dropout backward's store into
/// four 4-byte ones, hence the PTX store.
__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* p, const float (&in)[8], float (&stored)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    stored[2 * q] = in[2 * q];
    stored[2 * q + 1] = in[2 * q + 1];
    w[q] = round_bf16_pair(stored[2 * q], stored[2 * q + 1]);
  }
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}
template <class T, int N>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[N]) {
  Pack<T, N> pack;
#pragma unroll
  for (int k = 0; k < N; ++k) pack.v[k] = from_acc<T>(in[k]);
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

/// VEC elements as one pack (VEC > 1) or one scalar (VEC == 1, any alignment).
template <class T, int VEC>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[VEC]) {
  if constexpr (VEC > 1) load_pack<T, VEC>(p, v);
  else v[0] = to_acc(*p);
}
template <class T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[VEC]) {
  if constexpr (VEC > 1) store_pack<T, VEC>(p, v);
  else *p = from_acc<T>(v[0]);
}

/// True when every pointer is 16-byte aligned and the row length is a multiple of the pack.
template <class T>
inline bool packable(int64_t row, std::initializer_list<const void*> pointers) {
  if (row % kPackSize<T> != 0) return false;
  for (const void* p : pointers)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

/// Calls f with a value of the CUDA element type of f32 or bf16 (the fused kernels' dtypes).
template <class F>
void dispatch_half_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: FT_FAIL(op, ": the fused kernel takes f32 or bf16, got ", dtype_name(dtype));
  }
}

/// Calls f with a value of the CUDA element type of a floating dtype.
template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: FT_FAIL(op, ": expected a floating dtype (f32, f64, bf16), got ", dtype_name(dtype));
  }
}

/// Calls f with an unsigned word as wide as the dtype's elements (for kernels that move elements
/// unchanged: where, transposes, gathers).
template <class F>
void dispatch_word(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

constexpr int kThreads = 256;

}  // namespace ft::cuda
