// The fused optimizer kernels on the multi-tensor apply: the global L2 norm that settles each
// step (clip factor, non-finite skip, step counts), scale, zero, AdamW and SGD. Every update
// reads its per-step scalars from the device StepState, so a captured graph replays with the
// values current at launch, and returns at once when the step is skipped.
#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"
#include "optim/cuda/multi_tensor_apply.cuh"
#include "optim/multi_tensor.h"

namespace ft::multi_tensor {

using cuda::begin_dependent_kernel;
using cuda::ChunkedTensor;
using cuda::ChunkTable;
using cuda::for_each_group;
using cuda::kGroup;
using cuda::launch_dependent;
using cuda::load_group;
using cuda::store_group;

namespace {

float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The kernels cast pointers without looking: anything else must fail here, on the host.
void check_operand(const Tensor& t, const char* op, const char* what) {
  FT_CHECK(t.is_cuda() && (t.dtype() == DType::F32 || t.dtype() == DType::BF16), "multi_tensor::", op, ": ", what,
           " must be f32 or bf16 on CUDA, got ", dtype_name(t.dtype()), " on ", t.device().str());
}
void check_state(const StepState& state, const char* op) {
  for (const Tensor* t :
       {&state.lr, &state.applied, &state.skipped, &state.skip_run, &state.grad_norm, &state.keep, &state.clip}) {
    if (!t->defined()) continue;
    FT_CHECK(t->is_cuda() && t->dtype() == DType::F32 && t->numel() == 1, "multi_tensor::", op,
             ": the step state must be one-element f32 tensors on CUDA, got ", dtype_name(t->dtype()), " ",
             shape_str(t->shape()), " on ", t->device().str());
  }
}

template <int DEPTH>
ChunkedTensor<DEPTH> entry(std::array<void*, DEPTH> addresses, const Tensor& t, int64_t id, bool flag = false) {
  return ChunkedTensor<DEPTH>{addresses, t.numel(), id, static_cast<uint8_t>(flag)};
}

// ---- L2 norm and step settling ----

template <class T>
struct SquaresOp {
  float* partials;  // one per block of the apply (cuda::block_count)
  __device__ void operator()(const ChunkTable<1>& table, int tensor, int64_t begin, int64_t count,
                             float& thread_sum) const {
    const T* x = static_cast<const T*>(table.addresses[0][tensor]);
    for_each_group(begin, count, [&](int64_t i, int n) {
      float v[kGroup];
      load_group(x, i, n, v);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) thread_sum += v[k] * v[k];
    });
  }
};

struct SettleTargets {
  float *grad_norm, *keep, *clip, *applied, *skipped, *skip_run;
  float max_grad_norm;
  bool skip_nonfinite;
  float* sum_only;  // set: write the sum of the partials there and settle nothing
};

// One block: adds the block partials in a fixed order, then settles the step.
__global__ void settle_kernel(const float* partials, int64_t count, SettleTargets out) {
  begin_dependent_kernel();
  __shared__ float scratch[33];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = cuda::block_sum(sum, scratch);
  if (threadIdx.x != 0) return;
  if (out.sum_only) {
    *out.sum_only = sum;
    return;
  }
  float keep = 1.0f, clip = 1.0f;
  if (count > 0) {
    const float norm = sqrtf(sum);
    if (out.grad_norm) *out.grad_norm = norm;
    if (out.skip_nonfinite && !isfinite(norm)) keep = 0.0f;
    if (out.max_grad_norm > 0.0f) clip = fminf(1.0f, out.max_grad_norm / (norm + 1e-6f));
  }
  if (out.keep) *out.keep = keep;
  if (out.clip) *out.clip = clip;
  if (out.applied) *out.applied += keep;
  if (out.skipped) *out.skipped += 1.0f - keep;
  if (out.skip_run) *out.skip_run = keep > 0.0f ? 0.0f : *out.skip_run + 1.0f;
}

// ---- scale and zero ----

template <class T>
struct ScaleOp {
  const float* factor;  // nullptr: zero
  __device__ void operator()(const ChunkTable<1>& table, int tensor, int64_t begin, int64_t count, float&) const {
    T* x = static_cast<T*>(table.addresses[0][tensor]);
    const float f = factor ? *factor : 0.0f;
    for_each_group(begin, count, [&](int64_t i, int n) {
      float v[kGroup];
      if (factor) load_group(x, i, n, v);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) v[k] = factor ? v[k] * f : 0.0f;
      store_group(x, i, n, v);
    });
  }
};

// ---- the updates ----

struct StepScalars {
  const float *lr, *applied, *keep, *clip;
};

StepScalars scalars(const StepState& s) { return {ptr(s.lr), ptr(s.applied), ptr(s.keep), ptr(s.clip)}; }

/// Stochastic rounding of f32 to bf16: adds 16 random bits below the bf16 mantissa and
/// truncates, so the expected value is the f32 value (finite inputs away from the max).
__device__ __forceinline__ __nv_bfloat16 round_stochastic(float v, uint32_t random) {
  const uint32_t bits = __float_as_uint(v);
  if (!isfinite(v)) return __float2bfloat16_rn(v);
  return __ushort_as_bfloat16(static_cast<unsigned short>((bits + (random & 0xFFFFu)) >> 16));
}

/// Writes the working copy of 4 updated master values: bf16 (to nearest or stochastically) or,
/// when the parameter is its own master, nothing more.
template <class P>
struct WorkingCopy {
  bool stochastic;
  uint64_t seed;
  __device__ void store(P* param, int64_t i, int n, const float (&master)[kGroup], int32_t id, float step) const {
    if constexpr (std::is_same_v<P, __nv_bfloat16>) {
      if (!stochastic) {
        store_group(param, i, n, master);
        return;
      }
      // Keyed on (seed, step) with the counter (tensor id, element / 4): fresh bits per step.
      const uint64_t key = seed ^ (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull);
#pragma unroll
      for (int h = 0; h < kGroup / 4; ++h) {
        const philox::Uint4 r =
            philox::block_bits(key, (static_cast<uint64_t>(id) << 40) | static_cast<uint64_t>((i >> 2) + h));
        const uint32_t words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (h * 4 + k < n) param[i + h * 4 + k] = round_stochastic(master[h * 4 + k], words[k]);
      }
    }
  }
};

// Lists: 0 grad (f32, a view of the flat gradient buffer), 1 param (P), 2 m, 3 v [, 4 master
// (f32) when P is bf16].
template <class P, int DEPTH>
struct AdamWOp {
  float beta1, beta2, eps, weight_decay;
  StepScalars step;
  WorkingCopy<P> copy;
  __device__ void operator()(const ChunkTable<DEPTH>& table, int tensor, int64_t begin, int64_t count, float&) const {
    if (*step.keep == 0.0f) return;
    const float* g = static_cast<const float*>(table.addresses[0][tensor]);
    P* param = static_cast<P*>(table.addresses[1][tensor]);
    float* m = static_cast<float*>(table.addresses[2][tensor]);
    float* v = static_cast<float*>(table.addresses[3][tensor]);
    float* master = DEPTH == 5 ? static_cast<float*>(table.addresses[DEPTH - 1][tensor]) : reinterpret_cast<float*>(param);
    const float lr = *step.lr, clip = *step.clip, t = *step.applied;
    // The same formulas as the twin: 1 − β^t as 1 − exp(t·log β).
    const float bias1 = 1.0f - expf(t * logf(beta1)), bias2 = 1.0f - expf(t * logf(beta2));
    const float decay = table.flags[tensor] ? 1.0f - lr * weight_decay : 1.0f;
    for_each_group(begin, count, [&](int64_t i, int n) {
      float gv[kGroup], mv[kGroup], vv[kGroup], w[kGroup];
      load_group(g, i, n, gv);
      load_group(m, i, n, mv);
      load_group(v, i, n, vv);
      load_group(master, i, n, w);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        const float grad = gv[k] * clip;
        mv[k] = mv[k] * beta1 + grad * (1.0f - beta1);
        vv[k] = vv[k] * beta2 + grad * grad * (1.0f - beta2);
        const float update = (mv[k] / bias1) / (sqrtf(vv[k] / bias2) + eps);
        w[k] = w[k] * decay - update * lr;
      }
      store_group(m, i, n, mv);
      store_group(v, i, n, vv);
      store_group(master, i, n, w);
      if constexpr (DEPTH == 5) copy.store(param, i, n, w, table.ids[tensor], t);
    });
  }
};

// Lists: 0 grad (f32), 1 param (P), 2 momentum [, 3 master (f32) when P is bf16].
template <class P, int DEPTH>
struct SGDOp {
  float momentum, weight_decay;
  StepScalars step;
  __device__ void operator()(const ChunkTable<DEPTH>& table, int tensor, int64_t begin, int64_t count, float&) const {
    if (*step.keep == 0.0f) return;
    const float* g = static_cast<const float*>(table.addresses[0][tensor]);
    P* param = static_cast<P*>(table.addresses[1][tensor]);
    float* buf = static_cast<float*>(table.addresses[2][tensor]);
    float* master = DEPTH == 4 ? static_cast<float*>(table.addresses[DEPTH - 1][tensor]) : reinterpret_cast<float*>(param);
    const float lr = *step.lr, clip = *step.clip;
    for_each_group(begin, count, [&](int64_t i, int n) {
      float gv[kGroup], bv[kGroup], w[kGroup];
      load_group(g, i, n, gv);
      load_group(master, i, n, w);
      if (buf) load_group(buf, i, n, bv);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        float d = gv[k] * clip + w[k] * weight_decay;
        if (buf) d = bv[k] = bv[k] * momentum + d;
        w[k] -= d * lr;
      }
      if (buf) store_group(buf, i, n, bv);
      store_group(master, i, n, w);
      if constexpr (DEPTH == 4) store_group(param, i, n, w);
    });
  }
};

// Groups are read and written whole: kGroup f32 elements (16 bytes), or bf16 ones (8).
bool aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % (kGroup * sizeof(float)) == 0;
}

}  // namespace

bool fused_supported(const std::vector<Tensor>& tensors, DType state_dtype) {
  if (state_dtype != DType::F32) return false;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!t.is_cuda() || !aligned(t)) return false;  // tensors are contiguous by construction
    if (t.dtype() != DType::F32 && t.dtype() != DType::BF16) return false;
  }
  return true;
}

void settle_step(const std::vector<Tensor>& tensors, const StepState& state, const StepPolicy& policy,
                 const std::function<void(const Tensor&)>& sum_across) {
  check_state(state, "settle_step");
  std::vector<ChunkedTensor<1>> f32, bf16;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_operand(t, "settle_step", "every tensor");
    (t.dtype() == DType::BF16 ? bf16 : f32).push_back(entry<1>({t.data_ptr()}, t, static_cast<int64_t>(i)));
  }
  const int64_t f32_blocks = cuda::block_count(f32), blocks = f32_blocks + cuda::block_count(bf16);
  // One partial per block, in block order: f32 tensors first, then bf16 ones.
  Tensor partials;
  if (blocks > 0) {
    const Device device = tensors.front().device();
    partials = Tensor::empty({blocks}, DType::F32, device);
    cuda::multi_tensor_apply<1>(f32, SquaresOp<float>{partials.data<float>()});
    cuda::multi_tensor_apply<1>(bf16, SquaresOp<__nv_bfloat16>{partials.data<float>() + f32_blocks});
  }
  const SettleTargets out{ptr(state.grad_norm),         ptr(state.keep),        ptr(state.clip),
                          ptr(state.applied),           ptr(state.skipped),     ptr(state.skip_run),
                          static_cast<float>(policy.max_grad_norm), policy.skip_nonfinite, nullptr};
  if (sum_across) {
    // This rank's sum of squares, added up with the others', is the one partial of the settle.
    const Tensor total = Tensor::empty({1}, DType::F32, state.keep.device());
    SettleTargets sum_only = out;
    sum_only.sum_only = total.data<float>();
    launch_dependent(settle_kernel, 1, 1024, 0, blocks > 0 ? partials.data<float>() : nullptr, blocks, sum_only);
    FT_CUDA_CHECK_LAUNCH("settle_kernel (sum of squares)");
    sum_across(total);
    launch_dependent(settle_kernel, 1, 1024, 0, total.data<float>(), 1, out);
    FT_CUDA_CHECK_LAUNCH("settle_kernel");
    return;
  }
  launch_dependent(settle_kernel, 1, 1024, 0, blocks > 0 ? partials.data<float>() : nullptr, blocks, out);
  FT_CUDA_CHECK_LAUNCH("settle_kernel");
}

namespace {
void scale_or_zero(const std::vector<Tensor>& tensors, const float* factor) {
  std::vector<ChunkedTensor<1>> f32, bf16;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_operand(t, factor ? "scale" : "zero", "every tensor");
    (t.dtype() == DType::BF16 ? bf16 : f32).push_back(entry<1>({t.data_ptr()}, t, static_cast<int64_t>(i)));
  }
  cuda::multi_tensor_apply<1>(f32, ScaleOp<float>{factor});
  cuda::multi_tensor_apply<1>(bf16, ScaleOp<__nv_bfloat16>{factor});
}
}  // namespace

void scale(const std::vector<Tensor>& tensors, const Tensor& factor) {
  FT_CHECK(factor.dtype() == DType::F32 && factor.numel() == 1 && factor.is_cuda(),
           "multi_tensor::scale: the factor must be one f32 element on CUDA");
  scale_or_zero(tensors, factor.data<float>());
}

void zero(const std::vector<Tensor>& tensors) { scale_or_zero(tensors, nullptr); }

namespace {
// Splits the slots by parameter dtype: f32 parameters are their own master (one list fewer).
template <int DEPTH_F32, int DEPTH_BF16, class AddressesF32, class AddressesBF16>
void split_by_dtype(const std::vector<ParamSlots>& slots, AddressesF32&& addresses_f32, AddressesBF16&& addresses_bf16,
                    std::vector<ChunkedTensor<DEPTH_F32>>& f32, std::vector<ChunkedTensor<DEPTH_BF16>>& bf16) {
  for (const ParamSlots& s : slots) {
    check_operand(s.param, "update", "every parameter");
    for (const Tensor* state : {&s.master, &s.first, &s.second}) {
      if (!state->defined()) continue;
      FT_CHECK(state->is_cuda() && state->dtype() == DType::F32 && state->numel() == s.param.numel(),
               "fused optimizer: parameter ", s.id, "'s master weights and moments must be f32 on CUDA with ",
               s.param.numel(), " elements");
    }
    FT_CHECK(s.grad.is_cuda() && s.grad.dtype() == DType::F32, "fused optimizer: parameter ", s.id,
             "'s gradient must be f32 on CUDA (a GradBuffer view), got ", dtype_name(s.grad.dtype()));
    FT_CHECK(s.grad.numel() == s.param.numel(), "fused optimizer: parameter ", s.id, " has ", s.param.numel(),
             " elements but its gradient ", s.grad.numel());
    if (s.param.dtype() == DType::BF16) {
      FT_CHECK(s.master.defined(), "fused optimizer: bf16 parameter ", s.id, " needs an f32 master");
      bf16.push_back(entry<DEPTH_BF16>(addresses_bf16(s), s.param, s.id, s.decay));
    } else {
      f32.push_back(entry<DEPTH_F32>(addresses_f32(s), s.param, s.id, s.decay));
    }
  }
}
}  // namespace

void adamw(const std::vector<ParamSlots>& slots, const AdamWConfig& config, const StepState& state) {
  check_state(state, "adamw");
  for (const ParamSlots& s : slots)
    FT_CHECK(s.first.defined() && s.second.defined(), "multi_tensor::adamw: parameter ", s.id, " has no moments");
  std::vector<ChunkedTensor<4>> f32;
  std::vector<ChunkedTensor<5>> bf16;
  auto own_master = [](const ParamSlots& s) {
    return std::array<void*, 4>{s.grad.data_ptr(), s.param.data_ptr(), s.first.data_ptr(), s.second.data_ptr()};
  };
  auto with_master = [](const ParamSlots& s) {
    return std::array<void*, 5>{s.grad.data_ptr(), s.param.data_ptr(), s.first.data_ptr(), s.second.data_ptr(),
                                s.master.data_ptr()};
  };
  split_by_dtype<4, 5>(slots, own_master, with_master, f32, bf16);
  const float b1 = static_cast<float>(config.beta1), b2 = static_cast<float>(config.beta2);
  const float eps = static_cast<float>(config.eps), wd = static_cast<float>(config.weight_decay);
  cuda::multi_tensor_apply<4>(f32, AdamWOp<float, 4>{b1, b2, eps, wd, scalars(state), {false, 0}});
  cuda::multi_tensor_apply<5>(bf16, AdamWOp<__nv_bfloat16, 5>{b1, b2, eps, wd, scalars(state),
                                                              {config.stochastic_rounding, config.seed}});
}

void sgd(const std::vector<ParamSlots>& slots, const SGDConfig& config, const StepState& state) {
  check_state(state, "sgd");
  for (const ParamSlots& s : slots)
    FT_CHECK(config.momentum == 0.0 || s.first.defined(), "multi_tensor::sgd: parameter ", s.id,
             " has no momentum buffer");
  std::vector<ChunkedTensor<3>> f32;
  std::vector<ChunkedTensor<4>> bf16;
  const bool momentum = config.momentum != 0.0;
  auto own_master = [momentum](const ParamSlots& s) {
    return std::array<void*, 3>{s.grad.data_ptr(), s.param.data_ptr(), momentum ? s.first.data_ptr() : nullptr};
  };
  auto with_master = [momentum](const ParamSlots& s) {
    return std::array<void*, 4>{s.grad.data_ptr(), s.param.data_ptr(), momentum ? s.first.data_ptr() : nullptr,
                                s.master.data_ptr()};
  };
  split_by_dtype<3, 4>(slots, own_master, with_master, f32, bf16);
  const float mo = static_cast<float>(config.momentum), wd = static_cast<float>(config.weight_decay);
  cuda::multi_tensor_apply<3>(f32, SGDOp<float, 3>{mo, wd, scalars(state)});
  cuda::multi_tensor_apply<4>(bf16, SGDOp<__nv_bfloat16, 4>{mo, wd, scalars(state)});
}

}  // namespace ft::multi_tensor
