#include "lib/autograd.h"

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "lib/error.h"
#include "lib/ops/elementwise.h"
#include "lib/runtime.h"

namespace ft {

namespace {
thread_local bool grad_mode = true;
}

bool grad_mode_enabled() { return grad_mode; }
NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

namespace {
/// Attaches a node for the op to `output` when recording is on and an input needs a gradient;
/// returns it (null when nothing was recorded).
Node* attach_node(const char* name, Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!grad_mode) return nullptr;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return nullptr;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(backward);
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  for (const Tensor& t : inputs) {
    Edge edge;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) edge.node = t.grad_fn();
      else edge.leaf = t.impl_ptr();
    }
    node->edges.push_back(std::move(edge));
  }
  Node* attached = node.get();
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
  return attached;
}
}  // namespace

Tensor record(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  attach_node(name, output, inputs, std::move(backward));
  return output;
}

Tensor record_adding(const char* name, Tensor output, const std::vector<Tensor>& inputs, AddingBackwardFn backward) {
  if (Node* node = attach_node(name, output, inputs, [backward](const Tensor& g) { return backward(g, Tensor()); }))
    node->adding = std::move(backward);
  return output;
}

namespace {

void accumulate(Tensor& slot, const Tensor& grad) {
  if (!slot.defined()) slot = grad;
  else slot = add(slot, grad);
}

void accumulate_into_leaf(TensorImpl& leaf, const Tensor& grad) {
  FT_CHECK(grad.shape() == leaf.shape, "backward: gradient of shape ", shape_str(grad.shape()),
           " for a leaf of shape ", shape_str(leaf.shape));
  if (!leaf.grad.defined()) {
    // A gradient nobody else holds (a fresh buffer from the op's backward) is taken as it is,
    // as PyTorch's AccumulateGrad does; anything shared is copied, so later in-place updates
    // of .grad() cannot reach another tensor.
    const bool sole_owner = grad.impl_ptr().use_count() == 1 && grad.impl()->storage.use_count() == 1;
    if (sole_owner && grad.dtype() == leaf.dtype) {
      leaf.grad = grad.detach();
      return;
    }
    Tensor fresh = Tensor::empty(grad.shape(), leaf.dtype, grad.device());
    fresh.copy_(grad);
    leaf.grad = fresh;
    return;
  }
  leaf.grad.assign_(add(leaf.grad, grad.dtype() == leaf.dtype ? grad : grad.to(leaf.dtype)));
}


using LeafSink = std::function<void(TensorImpl& leaf, const Tensor& grad)>;

void walk_backward(const Tensor& root, const Tensor& grad, bool retain_graph, const LeafSink& sink) {
  NoGradGuard no_grad;
  if (!root.grad_fn()) {
    FT_CHECK(root.requires_grad(), "backward: the tensor does not require grad and has no history");
    sink(*root.impl(), grad);
    return;
  }
  // Count, for every node, how many edges point at it, so it runs only after all its users.
  std::unordered_map<Node*, int> pending_users;
  std::vector<Node*> stack{root.grad_fn().get()};
  std::unordered_set<Node*> seen{root.grad_fn().get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->edges) {
      if (!e.node) continue;
      pending_users[e.node.get()]++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad;
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(grads[node.get()]);
    grads.erase(node.get());
    if (!g.defined()) {  // reached, but no gradient flowed into it: pass the nothing along
      for (const Edge& e : node->edges)
        if (e.node && --pending_users[e.node.get()] == 0) ready.push_back(e.node);
      continue;
    }
    FT_CHECK(node->backward, "backward: the graph through '", node->name,
             "' was already freed; pass retain_graph=true to run backward twice");
    // An op that adds its first input's pending gradient itself takes it over: the slot is then
    // empty, and what the op returns is the whole sum.
    Tensor pending;
    if (node->adding && !node->edges.empty() && node->edges[0].node) {
      const auto slot = grads.find(node->edges[0].node.get());
      if (slot != grads.end() && slot->second.defined()) {
        pending = std::move(slot->second);
        grads.erase(slot);
      }
    }
    std::vector<Tensor> input_grads = pending.defined() ? node->adding(g, pending) : node->backward(g);
    FT_CHECK(input_grads.size() == node->edges.size(), "backward of ", node->name, " returned ",
             input_grads.size(), " gradients for ", node->edges.size(), " inputs");
    FT_CHECK(!pending.defined() || input_grads[0].defined(), "backward of ", node->name,
             " dropped the pending gradient of its first input");
    if (!retain_graph) node->backward = nullptr, node->adding = nullptr;  // frees the saved tensors now
    for (size_t i = 0; i < node->edges.size(); ++i) {
      const Edge& e = node->edges[i];
      if (!e.active() || !input_grads[i].defined()) {
        if (e.node && --pending_users[e.node.get()] == 0) ready.push_back(e.node);
        continue;
      }
      if (e.leaf) {
        sink(*e.leaf, input_grads[i]);
      } else {
        FT_CHECK(input_grads[i].shape() == e.node->output_shape, "backward of ", node->name, ": gradient ", i,
                 " has shape ", shape_str(input_grads[i].shape()), ", expected ", shape_str(e.node->output_shape));
        accumulate(grads[e.node.get()], input_grads[i]);
        if (--pending_users[e.node.get()] == 0) ready.push_back(e.node);
      }
    }
  }
}

}  // namespace

namespace {

/// The cached ones of a seed (CUDA only; never made during a capture, whose allocations the
/// graph owns). Nothing writes to them: a leaf seeded this way copies its gradient, since the
/// cache still holds the tensor (accumulate_into_leaf).
std::mutex unit_seeds_mutex;
std::map<std::tuple<int, int, int, Shape>, Tensor>& unit_seeds() {
  static auto* seeds = new std::map<std::tuple<int, int, int, Shape>, Tensor>();  // outlives static teardown
  return *seeds;
}

Tensor unit_seed(const Shape& shape, DType dtype, Device device) {
  if (!device.is_cuda() || capturing()) return Tensor::full(shape, 1.0, dtype, device);
  std::lock_guard<std::mutex> lock(unit_seeds_mutex);
  Tensor& seed = unit_seeds()[{static_cast<int>(device.type), device.index, static_cast<int>(dtype), shape}];
  if (!seed.defined()) seed = Tensor::full(shape, 1.0, dtype, device);
  return seed;
}

}  // namespace

bool is_unit_seed(const Tensor& g) {
  if (!g.defined() || !g.is_cuda()) return false;
  std::lock_guard<std::mutex> lock(unit_seeds_mutex);
  const auto it = unit_seeds().find({static_cast<int>(g.device().type), g.device().index, static_cast<int>(g.dtype()),
                                     g.shape()});
  return it != unit_seeds().end() && it->second.impl() == g.impl();
}

Tensor seed_gradient(const Tensor& root, const Tensor& grad, const char* op) {
  if (!grad.defined()) {
    FT_CHECK(root.numel() == 1, op, ": a gradient is needed for a non-scalar tensor of shape ", shape_str(root.shape()));
    return unit_seed(root.shape(), root.dtype(), root.device());
  }
  FT_CHECK(grad.shape() == root.shape(), op, ": gradient of shape ", shape_str(grad.shape()), " for a tensor of shape ",
           shape_str(root.shape()));
  return grad;
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  walk_backward(root, grad, retain_graph, accumulate_into_leaf);
}

std::vector<Tensor> gradients(const Tensor& root, const Tensor& grad, const std::vector<Tensor>& leaves,
                              bool retain_graph) {
  std::unordered_map<const TensorImpl*, size_t> slot_of;
  for (size_t i = 0; i < leaves.size(); ++i) {
    FT_CHECK(leaves[i].defined() && leaves[i].requires_grad() && !leaves[i].grad_fn(),
             "gradients: input ", i, " must be a leaf tensor that requires grad");
    slot_of[leaves[i].impl()] = i;
  }
  check_defined(root, "gradients", "root");
  FT_CHECK(root.requires_grad(), "gradients: the root does not require grad");
  std::vector<Tensor> out(leaves.size());
  walk_backward(root, seed_gradient(root, grad, "gradients"), retain_graph, [&](TensorImpl& leaf, const Tensor& g) {
    auto it = slot_of.find(&leaf);
    if (it == slot_of.end()) return;  // a leaf nobody asked about keeps its .grad() as it is
    FT_CHECK(g.shape() == leaf.shape, "gradients: gradient of shape ", shape_str(g.shape()), " for a leaf of shape ",
             shape_str(leaf.shape));
    Tensor& slot = out[it->second];
    slot = slot.defined() ? add(slot, g) : g;
  });
  return out;
}

}  // namespace ft
