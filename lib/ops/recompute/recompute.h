// Activation recomputation ("gradient checkpointing", as torch.utils.checkpoint's reentrant form):
// y = recompute(fn, x, parameters) runs fn(x) without recording, so nothing inside fn is kept
// for backward but x. Backward runs fn on x again, recording, and backpropagates the incoming
// gradient through that run with a run_backward of its own: the parameters fn reads get their
// gradients there (added into their .grad or GradBuffer views, their ready hooks called, as
// without recomputation), and x's gradient is returned.
//
// Exact: the second run executes the same ops on the same x, and the Philox counter
// (lib/ops/random/random.h) is set back to its value at the first run around it, so dropout
// inside fn draws the same masks; fn's gradients equal those without recomputation bit for bit
// (the same kernels in the same order; tests/lib/ops/recompute_test.cpp). A model whose layers
// become such functions may differ by rounding where its layers used to hand a pending add to
// the next one (models/causal_lm.h). Capturable: no host synchronization.
//
// Selective (torchtitan's per-op policy, llm.c's -r): the products of 2-D weights (fn's linear
// layers) are kept from the first run and taken again in the second (MatmulStash,
// lib/ops/matmul/matmul.h) instead of computed, so backward recomputes only the norms,
// activations, attention and the fused ops around the products. A linear whose bias or
// activation rides on its product (GPT-2's, the epilogue path) is no such product and is
// recomputed.
//
// Contract: fn reads x and parameters that nothing outside fn uses (a transformer block: their
// ready hooks fire in the inner backward), and `parameters` lists the ones that may train: with
// none training and x not needing a gradient, fn simply runs. fn does not itself call a
// selective recompute (its stash would hide the outer one's). Not for ft::gradients, which must
// not touch a leaf's gradient.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// What a layer keeps for backward: None, every activation (no recomputation); Block, its input
/// alone, the layer run again in backward; Selective, its input and its linears' products.
enum class Recompute { None, Block, Selective };
/// "none", "block" or "selective"; anything else is an ft::Error naming `who`.
Recompute parse_recompute(const std::string& name, const std::string& who);

/// fn(x), recomputed in backward as `how` says (None: fn(x) as it is).
Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                 const std::vector<Tensor>& parameters, Recompute how = Recompute::Block);

}  // namespace ft
