// Define-by-run autograd: each differentiable op records a Node holding what its backward needs.
//
// backward() walks the nodes reachable from the root in topological order, sums the
// gradients that reach a node from several uses, accumulates (+=) into leaves' .grad(), and
// frees each node's saved tensors once it has run (unless retain_graph is asked for).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// Given the gradient of the op's output, returns one gradient per input (undefined where the
/// input needs none). Runs with grad mode off.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

/// A backward that also adds `pending` into the gradient it returns for its first input, in
/// the same pass: `pending` is what other uses of that input have already contributed
/// (undefined when nothing has). It spares the separate add kernel that summing the two would
/// take, the way a fused LayerNorm backward takes the residual stream's gradient.
using AddingBackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const Tensor& pending)>;

/// Where a gradient flows: into another op's node, or into a leaf tensor's .grad().
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool active() const { return node || leaf; }
};

struct Node {
  std::string name;
  std::vector<Edge> edges;  // one per op input
  BackwardFn backward;      // released after use, which frees the saved tensors
  AddingBackwardFn adding;  // set by record_adding (then backward calls it with no pending)
  Shape output_shape;
  DType output_dtype;
};

bool grad_mode_enabled();

/// Disables graph recording in its scope (evaluation, optimizer updates, backward itself).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// True when recording is on and any input requires a gradient.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

/// Records `output` as the result of a differentiable op over `inputs` when any of them needs a
/// gradient; returns output (now with grad_fn). The backward function must return one gradient
/// per input, in order, each of its input's shape.
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward);

/// record() for an op whose backward adds the first input's pending gradient itself.
Tensor record_adding(const char* name, Tensor output, const std::vector<Tensor>& inputs, AddingBackwardFn backward);

/// The gradient backward starts from: `grad` checked against root's shape, or ones for a
/// one-element root when grad is undefined. On CUDA those ones are a cached constant (made
/// outside any graph capture), so a replayed training step runs no fill kernel for its seed.
Tensor seed_gradient(const Tensor& root, const Tensor& grad, const char* op);

/// True when g is that cached unit seed, i.e. exactly 1: a loss op whose backward only scales
/// gradients it computed in forward by the upstream value (the fused cross-entropies) skips it.
bool is_unit_seed(const Tensor& g);

/// Runs backward from root with the given gradient.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

/// The gradients of root with respect to the given leaves, as torch.autograd.grad returns them:
/// no leaf's .grad() is read or written, and a gradient the backward produced is returned as it
/// is, not copied (one a leaf would have to copy because another holds it, such as the
/// upstream gradient passed through a residual add). Undefined where no gradient reached a leaf.
std::vector<Tensor> gradients(const Tensor& root, const Tensor& grad, const std::vector<Tensor>& leaves,
                              bool retain_graph = false);

}  // namespace ft
