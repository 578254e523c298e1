// The fused LoRA linear's CUDA side (lib/ops/lora_linear/lora_linear.h): cuBLASLt products, the dropout
// and bias + activation kernels, arranged so that the adapter costs the base linear as little
// as possible. Without dropout the adapter is folded into the weight (one product forward, one
// for dx); with it, the adapter's term is added in the base product's beta = 1.
#include "lib/ops/lora_linear/lora_linear_cuda.h"

#include "lib/cuda/runtime.h"
#include "lib/ops/bias_act/bias_act_cuda.h"
#include "lib/ops/dropout/dropout_cuda.h"
#include "lib/ops/linear/linear_cuda.h"
#include "lib/ops/lora_linear/lora_adapter_grads.h"
#include "lib/ops/matmul/matmul_cuda.h"
#include "lib/ops/reduce/reduce_cuda.h"

namespace ft::cuda {

namespace {

// Wm = W + s·B·A in a fresh buffer.
Tensor merged_weight(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, double scale) {
  Tensor merged = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  ft::cuda::lora_merge(weight, lora_a, lora_b, scale, merged);
  return merged;
}

// drop(x) into a scratch buffer, from the same (seed, offset) as every other use of this mask.
Tensor dropped_input(const Tensor& x, const LoRAOptions& options) {
  Tensor dropped = Tensor::empty(x.shape(), x.dtype(), x.device());
  dropout_forward(x, Tensor(), Tensor(), options.dropout, options.seed, options.offset, dropped);
  return dropped;
}

}  // namespace

void lora_merge(const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b, double scale, const Tensor& out) {
  // One product whose addend is W (beta = 1, C = W, D = out): f32 sums, one rounding, no copy.
  // In place (out is W) it goes through a scratch buffer: cuBLASLt rounds C = D differently by an
  // ulp now and then, and a merged W must equal the Wm the fused forward computes.
  const int64_t rows = weight.size(0), cols = weight.size(1), r = lora_a.size(0);
  const Tensor target = out.shares_storage(weight) ? Tensor::empty(out.shape(), out.dtype(), out.device()) : out;
  matmul(lora_b, lora_a, target, 1, rows, cols, r, false, false, false, false, scale, weight);
  if (!target.shares_storage(out)) out.copy_(target);
}

LoRASaved lora_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                              const Tensor& lora_b, const LoRAOptions& options, const Tensor& y) {
  const int64_t m = x.size(0), in = x.size(1), out = weight.size(0), r = lora_a.size(0);
  const Activation act = options.activation;
  LoRASaved saved;
  saved.u = Tensor::empty({m, r}, x.dtype(), x.device());
  Tensor merged;
  if (options.dropout == 0.0) {
    matmul(x, lora_a, saved.u, 1, m, r, in, false, true, false);
    merged = merged_weight(weight, lora_a, lora_b, options.scale);
    // The base linear's epilogue (bias, activation, GELU's pre-activation as aux) where it
    // applies: with a bias, and rows of OUT 16-byte aligned for the aux buffer.
    if (bias.defined() && out % 8 == 0) {
      Tensor pre = act == Activation::GELU ? Tensor::empty({m, out}, x.dtype(), x.device()) : Tensor();
      linear_forward(x, merged, bias, act, y, pre);
      saved.act_input = act == Activation::GELU ? pre : act == Activation::ReLU ? y : Tensor();
      return saved;
    }
  } else {  // the scratch drop(x) lives only for this product
    const Tensor dropped = dropped_input(x, options);
    matmul(dropped, lora_a, saved.u, 1, m, r, in, false, true, false);
  }
  // pre = x·Wmᵀ, or s·u·Bᵀ + x·Wᵀ (beta = 1); then the bias and activation kernel, if any.
  const bool plain = !bias.defined() && act == Activation::None;
  const Tensor pre = plain ? y : Tensor::empty({m, out}, x.dtype(), x.device());
  if (merged.defined()) {
    matmul(x, merged, pre, 1, m, out, in, false, true, false);
  } else {
    matmul(saved.u, lora_b, pre, 1, m, out, r, false, true, false, false, options.scale);
    matmul(x, weight, pre, 1, m, out, in, false, true, false, /*accumulate=*/true);
  }
  if (plain) return saved;
  bias_act_forward(pre, bias, act, y);
  if (act != Activation::None) {
    saved.act_input = pre;
    saved.act_bias = bias;
  }
  return saved;
}

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& lora_a,
                          const Tensor& lora_b, const LoRAOptions& options, const LoRASaved& saved, const Tensor& dx,
                          const GradOutput& da, const GradOutput& db_lora, const GradOutput& dbias) {
  const int64_t m = x.size(0), in = x.size(1), out = weight.size(0), r = lora_a.size(0);
  const Activation act = options.activation;
  Tensor dpre = dy;
  if (act != Activation::None) {
    dpre = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    bias_act_backward(dy, saved.act_input, saved.act_bias, act, dpre, dbias);
  } else if (dbias.defined()) {
    column_sums(dy, m, out, dbias);
  }
  // v = dpre·B feeds dA and, with dropout, dx; dB = s·dpreᵀ·u. Both in one pass over dpre where
  // the kernel covers the shapes, else as two products.
  Tensor v;
  if (da.defined() || (dx.defined() && options.dropout > 0.0)) v = Tensor::empty({m, r}, dy.dtype(), dy.device());
  const bool both = v.defined() && db_lora.defined() && lora_adapter_grads(dpre, lora_b, saved.u, options.scale, v, db_lora);
  if (!both) {
    if (v.defined()) matmul(dpre, lora_b, v, 1, m, r, out, false, false, false);
    if (db_lora.defined())
      matmul(dpre, saved.u, db_lora.tensor, 1, out, r, m, true, false, false, db_lora.accumulate, options.scale);
  }
  if (options.dropout == 0.0) {
    if (dx.defined()) {
      const Tensor merged = merged_weight(weight, lora_a, lora_b, options.scale);
      matmul(dpre, merged, dx, 1, m, in, out, false, false, false);
    }
    if (da.defined()) matmul(v, x, da.tensor, 1, r, in, m, true, false, false, da.accumulate, options.scale);
    return;
  }
  if (dx.defined()) {  // dx = drop'(s·v·A) + dpre·W
    Tensor adapter = Tensor::empty({m, in}, dy.dtype(), dy.device());
    matmul(v, lora_a, adapter, 1, m, in, r, false, false, false, false, options.scale);
    dropout_backward(adapter, options.dropout, options.seed, options.offset, dx, Tensor());
    matmul(dpre, weight, dx, 1, m, in, out, false, false, false, /*accumulate=*/true);
  }
  if (da.defined()) {
    const Tensor dropped = dropped_input(x, options);
    matmul(v, dropped, da.tensor, 1, r, in, m, true, false, false, da.accumulate, options.scale);
  }
}

}  // namespace ft::cuda
