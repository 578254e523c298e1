// The fused optimizer kernels: multi-tensor ops on CUDA that cover a whole list of tensors in a
// few launches (optim/cuda/multi_tensor_apply.cuh says how the lists are cut into units).
// Their twins are the per-tensor primitive updates in optimizer.cpp, adamw.cpp and sgd.cpp;
// the callers choose between the two with use_fused and fused_supported. Defined only in a CUDA
// build (optim/cuda/multi_tensor.cu): every call sits under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "lib/tensor.h"
#include "optim/optimizer.h"

namespace ft::multi_tensor {

/// True when the fused kernels take these tensors: all on CUDA, f32 or bf16, contiguous, and
/// the optimizer state (`state_dtype`) f32. Undefined tensors are ignored.
bool fused_supported(const std::vector<Tensor>& tensors, DType state_dtype = DType::F32);

/// Global L2 norm of `tensors` (f32, squares summed per block and the block sums added in a fixed
/// order: deterministic on a given GPU) into state.grad_norm, then settles the step: clip = min(1,
/// max_grad_norm / (norm + 1e-6)) when max_grad_norm > 0, else 1; keep = 0 when skip_nonfinite
/// and the norm is NaN or infinite, else 1; applied += keep; skipped += 1 − keep; skip_run = keep ? 0 : skip_run + 1. Undefined
/// members of `state` are not written. With `tensors` empty no norm is taken (keep = clip = 1).
/// `sum_across`, when set, is given the sum of squares (f32 [1] on the device) before the step
/// is settled, to add up in place with the other ranks' (ZeRO-1: each holds part of the
/// gradient); the norm is then that of every rank's tensors, taken even when `tensors` is empty.
void settle_step(const std::vector<Tensor>& tensors, const StepState& state, const StepPolicy& policy,
                 const std::function<void(const Tensor&)>& sum_across = {});

/// x *= factor[0] for every tensor (factor: f32 [1] on the device).
void scale(const std::vector<Tensor>& tensors, const Tensor& factor);
/// x = 0 for every tensor.
void zero(const std::vector<Tensor>& tensors);

/// One parameter's slots for the optimizer kernels. `grad` is f32 (its GradBuffer view), `master`
/// f32 when the parameter is bf16, undefined when the parameter (f32) is its own master.
struct ParamSlots {
  Tensor grad, param, master, first, second;  // `second` unused by SGD
  bool decay = true;
  int32_t id = 0;  // the update's index of this tensor (a parameter, or a ZeRO-1 piece of one): keys the
                   // stochastic rounding, so no two tensors of one step draw the same bits
};

struct AdamWConfig {
  double beta1, beta2, eps, weight_decay;
  /// Round the bf16 working copy stochastically (Philox keyed on seed, step, id, index).
  bool stochastic_rounding = false;
  uint64_t seed = 0;
};
/// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²; master = master·(1 − lr·wd·decay) −
/// lr·(m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + eps), with g = clip·grad and t = applied;
/// the bf16 parameter is then written from master. Nothing is written when keep is 0.
void adamw(const std::vector<ParamSlots>& slots, const AdamWConfig& config, const StepState& state);

struct SGDConfig {
  double momentum, weight_decay;
};
/// g' = clip·grad + wd·master; buf = momentum·buf + g' (buf = g' without momentum);
/// master −= lr·buf. Nothing is written when keep is 0.
void sgd(const std::vector<ParamSlots>& slots, const SGDConfig& config, const StepState& state);

}  // namespace ft::multi_tensor
