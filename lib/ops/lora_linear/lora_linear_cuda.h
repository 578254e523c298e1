// The CUDA side of lora_linear: its fused path (lora_linear_fused.cpp) and the launchers
// (lora_linear.cu, lora_adapter_grads.cu). Compiled only in a CUDA build; callers reach it
// under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/autograd.h"
#include "lib/ops/lora_linear/lora_linear.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// lora_linear's fused path: f32/bf16 x on CUDA, a frozen weight, activation None, ReLU or GELU.
Tensor lora_linear_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                         const Tensor& lora_b, const LoRAOptions& options);

/// lora_merge on CUDA (bf16/f32): one cuBLASLt product out = s·B·A + W (W as the addend C, so
/// out needs no copy of W first; out may be W).
void lora_merge(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, double scale, const Tensor& out);
/// What the fused forward keeps for backward.
struct LoRASaved {
  Tensor u;           // drop(x)·Aᵀ [M, r]
  Tensor act_input;   // what bias_act_backward reads (pre-activation, or y for ReLU); undefined for None
  Tensor act_bias;    // the bias bias_act_backward adds to act_input (when act_input lacks it)
};
/// y [M, OUT] for x [M, IN]; bias may be undefined.
LoRASaved lora_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                              const Tensor& lora_b, const LoRAOptions& options, const Tensor& y);
/// From dy [M, OUT]: dx [M, IN] (undefined: not wanted), dA, dB, db (GradOutputs, undefined when
/// not wanted; overwritten or added into f32 views).
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& lora_a,
                          const Tensor& lora_b, const LoRAOptions& options, const LoRASaved& saved, const Tensor& dx,
                          const GradOutput& da, const GradOutput& db_lora, const GradOutput& dbias);

}  // namespace ft::cuda
