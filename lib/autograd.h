// Define-by-run autograd: each differentiable op records a Node holding what its backward needs.
//
// backward() walks the nodes reachable from the root in topological order, sums the
// gradients that reach a node from several uses, accumulates (+=) into leaves' .grad(), and
// frees each node's saved tensors once it has run (unless retain_graph is asked for).
//
// Leaves attached to a GradBuffer (lib/grad_buffer.h) keep their gradient in a view of a flat
// buffer: backward adds into that view in place, and a fused op's backward may write into it
// itself (grad_target). Once per backward, after a leaf's last contribution, autograd calls the
// leaf's gradient-ready hooks: what data-parallel buckets listen to.
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

/// Turns recording on in its scope, inside a backward function (which runs with it off): how
/// recompute (lib/ops/recompute/recompute.h) records the forward it runs again.
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};
/// True when recording is on and any input requires a gradient.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

/// Records `output` as the result of a differentiable op over `inputs` when any of them needs a
/// gradient; returns output (now with grad_fn). The backward function must return one gradient
/// per input, in order, each of its input's shape.
Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward);

/// record() for an op whose backward reaches parameters that are not among its inputs (recompute
/// backpropagates into a block's parameters itself): records whenever recording is on, even
/// when no input needs a gradient.
Tensor record_opaque(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward);
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

/// Where a backward function may put input i's gradient itself: the persistent gradient view of
/// the leaf that input is (a GradBuffer view, in the buffer's dtype: f32 on CUDA), or undefined
/// (the input is not such a leaf, or this is not a run_backward, e.g. ft::gradients). A backward
/// that writes its gradient there returns `view` itself for that input; autograd then adds
/// nothing more. When `overwrite` is true the view is logically zero (nothing added since
/// zero_grad), so the op writes its gradient (beta = 0) instead of adding it (beta = 1), and must
/// then write every element: the memory may still hold an earlier step's values (see
/// grad_output for sparse writers).
struct GradTarget {
  Tensor view;
  bool overwrite = false;
};
/// Only valid inside a backward function that run_backward is calling (a thread-local of the walk).
GradTarget grad_target(size_t input);

/// Where a fused CUDA backward puts a parameter's gradient: `tensor`, overwritten, or, when
/// `accumulate`, added into (tensor is then an f32 GradBuffer view).
struct GradOutput {
  Tensor tensor;
  bool accumulate = false;
  /// tensor is a GradBuffer view: what the op does not write already holds zeros (or the
  /// earlier contributions), so a sparse gradient touches only the rows it reaches.
  bool view = false;
  GradOutput() = default;
  GradOutput(Tensor t, bool add = false, bool is_view = false)  // NOLINT: a plain tensor is overwritten
      : tensor(std::move(t)), accumulate(add), view(is_view) {}
  bool defined() const { return tensor.defined(); }
};
/// The output for input i of the running backward when `wanted`: its grad_target view when that
/// is f32 on CUDA (accumulate unless the view is logically zero), else a fresh tensor of that
/// shape, dtype and device. Returning `.tensor` from the backward then does the right thing
/// either way. `dense`: the op writes every element when it does not accumulate; a sparse op
/// (an embedding's rows) passes false, and a view still holding an earlier step's values is
/// zeroed for it first.
GradOutput grad_output(size_t input, bool wanted, const Shape& shape, DType dtype, Device device, bool dense = true);

/// Inside a backward that run_backward is calling: whether the gradient this node returns for
/// its input `input` is the whole of that input's gradient (the node that made the input
/// receives that very tensor, nothing added): no other user is still to run, and none that ran
/// left a gradient waiting (one an adding node took over does not wait). False for a leaf
/// input, outside a run_backward, or otherwise.
bool completes_input_gradient(size_t input);
/// Inside a backward that run_backward is calling: the f32 CUDA gradient view of `leaf`, which
/// need not be an input of the running node (an op that hands a gradient to the node before it,
/// lib/ops/linear/linear.h's BiasGradHandoff), for the caller to write all of it now (overwritten while
/// the view is logically zero, else added into); the view then counts as written. Undefined
/// when the leaf has no such view. The node whose input the leaf is must return the view itself
/// as that input's gradient (autograd then adds nothing more).
GradOutput claim_leaf_grad_view(const Tensor& leaf);

/// Makes `view` (same shape as leaf, a floating dtype, same device) the persistent gradient of
/// leaf: backward adds into it in place from now on. The view is assumed to hold zeros.
void attach_grad_view(const Tensor& leaf, const Tensor& view);
/// Undoes attach_grad_view: the leaf's gradient is dropped and later backwards take fresh ones.
void detach_grad_view(const Tensor& leaf);

/// Calls `hook` once per backward (run_backward) that reaches `leaf`, after its last
/// contribution: the walk counts the edges into the leaf in the reachable graph (a weight used
/// twice, like GPT-2's tied embedding, has two) and calls the hook when the last one has been
/// delivered, including contributions a fused op wrote into grad_target itself. On CUDA the
/// gradient is then complete in stream order (what is enqueued after the call sees it). A leaf
/// the backward does not reach gets no call. Returns the hook's id, for remove_grad_ready_hook.
uint64_t add_grad_ready_hook(const Tensor& leaf, std::function<void()> hook);
/// Removes that one hook; others' hooks on the leaf stay. Returns whether the leaf held it (it
/// may have been removed or cleared already: removing twice is harmless, as in destructors).
bool remove_grad_ready_hook(const Tensor& leaf, uint64_t id);
void clear_grad_ready_hooks(const Tensor& leaf);

/// The gradients of root with respect to the given leaves, as torch.autograd.grad returns them:
/// no leaf's .grad() is read or written, and a gradient the backward produced is returned as it
/// is, not copied (one a leaf would have to copy because another holds it, such as the
/// upstream gradient passed through a residual add). Undefined where no gradient reached a leaf.
std::vector<Tensor> gradients(const Tensor& root, const Tensor& grad, const std::vector<Tensor>& leaves,
                              bool retain_graph = false);

/// dst += scale · src, or dst = scale · src when overwrite, in place and in one pass: src (any
/// floating dtype, same device and element count) is converted to dst's dtype (f32 or f64) as it
/// is read. scale is undefined (1) or a one-element f32 tensor on the same device. No autograd:
/// this is how gradients reach their GradBuffer views (f32 sums of bf16 contributions on CUDA).
void accumulate_into(const Tensor& dst, const Tensor& src, bool overwrite = false, const Tensor& scale = Tensor());

}  // namespace ft
