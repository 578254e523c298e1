// lora_linear: a frozen linear with a low-rank adapter (LoRA, Hu et al. 2021, as Hugging Face
// PEFT defines it):
//
//   y = act(x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ)
//
// x: [..., IN]; W: [OUT, IN], frozen; b: [OUT] or undefined; A: [r, IN] and B: [OUT, r],
// trainable, 1 ≤ r ≤ min(IN, OUT); s = α/r (α/√r for rsLoRA). drop is Philox dropout on the
// adapter's input alone (lib/ops/dropout/dropout.h's mask: element i of x, flattened, is kept when
// philox::dropout_uniform(seed, offset, i) ≥ p). act is None, ReLU or GELU, applied after the adapter's
// term is added (GPT-2's c_fc). Every dtype and device must match.
//
// Fused (CUDA, bf16/f32, W not requiring grad):
// - p = 0: the adapter is folded into the weight, Wm = W + s·B·A (one small cuBLASLt product
//   summed in f32 with W and rounded once, as PEFT's merge does), and y is one product with
//   Wm whose epilogue adds the bias and applies the activation: the base linear's cost plus
//   an [OUT, IN] pass. u = x·Aᵀ [M, r] is computed for backward. Backward recomputes Wm and
//   gives dx = dpre·Wm (base and adapter together in one product), v = dpre·B [M, r] and
//   dB = s·dpreᵀ·u from one pass over dpre (lib/ops/lora_linear/lora_adapter_grads.h; bf16, r ≤ 32), and
//   dA = s·vᵀ·x; dA and dB are written straight into the f32 gradient views.
//   In bf16, Wm rounds the adapter's term to W's precision in the forward: its effect on y is
//   exact on average but dithered element by element (docs/design-notes.md, "LoRA").
// - p > 0: drop(x) is generated into a scratch buffer, u = drop(x)·Aᵀ, and the scratch is
//   freed; pre = s·u·Bᵀ, then pre += x·Wᵀ (beta = 1), then the bias and activation kernel.
//   Backward regenerates drop(x) from (seed, offset) for dA, and dx = dpre·W + drop'(s·v·A).
// Either way backward never computes dW, and what is kept beyond x and the activation's input
// is u: M·r values. The composite twin (matmul, dropout, scale, add, activate primitives) runs
// on the CPU, in unfused mode, and when W requires grad.
#pragma once
#include "lib/autograd.h"
#include "lib/ops/activation/activation.h"
#include "lib/tensor.h"

namespace ft {

struct LoRAOptions {
  double scale = 1.0;    // s
  double dropout = 0.0;  // p, in [0, 1)
  uint64_t seed = 0;     // the dropout's Philox key
  Tensor offset = {};    // one i64 on x's device (PhiloxCounter::take(x.numel())) when p > 0
  Activation activation = Activation::None;
};

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                   const Tensor& lora_b, const LoRAOptions& options);
/// The composite twin, from primitives.
Tensor lora_linear_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                             const Tensor& lora_b, const LoRAOptions& options);

/// out = W + s·B·A, summed in f32 and rounded once to W's dtype; out may be W itself (a merge in
/// place). Any device; the CPU sums in f64.
void lora_merge(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, double scale, const Tensor& out);

}  // namespace ft
