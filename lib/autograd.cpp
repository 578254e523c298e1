#include "lib/autograd.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "lib/error.h"
#include "lib/runtime.h"
#include "lib/runtime/elements.h"

namespace ft {

namespace {
thread_local bool grad_mode = true;
}

bool grad_mode_enabled() { return grad_mode; }
NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(grad_mode) { grad_mode = true; }
EnableGradGuard::~EnableGradGuard() { grad_mode = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

namespace {
/// Attaches a node for the op to `output` when recording is on and an input needs a gradient
/// (or, `always`, whenever recording is on); returns it (null when nothing was recorded).
Node* attach_node(const char* name, Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward,
                  bool always = false) {
  if (!grad_mode) return nullptr;
  bool any = always;
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

Tensor record_opaque(const char* name, Tensor output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  attach_node(name, output, inputs, std::move(backward), /*always=*/true);
  return output;
}

Tensor record_adding(const char* name, Tensor output, const std::vector<Tensor>& inputs, AddingBackwardFn backward) {
  if (Node* node = attach_node(name, output, inputs, [backward](const Tensor& g) { return backward(g, Tensor()); }))
    node->adding = std::move(backward);
  return output;
}

namespace {

// Two gradients of one tensor (same shape and device), summed into a fresh tensor of the first's dtype.
Tensor sum_gradients(const Tensor& a, const Tensor& b) {
  FT_CHECK(a.shape() == b.shape() && a.device() == b.device(), "backward: gradients of shape ", shape_str(a.shape()),
           " on ", a.device().str(), " and ", shape_str(b.shape()), " on ", b.device().str(), " for one tensor");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const void* addend = b.data_ptr();
  if (b.dtype() != a.dtype()) {  // converted into out first, then summed in place
    runtime::convert_elements(out.data_ptr(), a.dtype(), b.data_ptr(), b.dtype(), a.device(), a.numel());
    addend = out.data_ptr();
  }
  runtime::sum_elements(out.data_ptr(), a.data_ptr(), addend, a.dtype(), a.device(), a.numel());
  return out;
}

void accumulate(Tensor& slot, const Tensor& grad) { slot = slot.defined() ? sum_gradients(slot, grad) : grad; }

void accumulate_into_leaf(TensorImpl& leaf, const Tensor& grad) {
  FT_CHECK(grad.shape() == leaf.shape, "backward: gradient of shape ", shape_str(grad.shape()),
           " for a leaf of shape ", shape_str(leaf.shape));
  if (leaf.grad_is_view) {
    // A view the op wrote itself (grad_target) is already delivered; walk_backward cleared its flags.
    if (grad.impl() == leaf.grad.impl()) return;
    // += grad, or = grad while the view is logically zero.
    accumulate_into(leaf.grad, grad, /*overwrite=*/leaf.grad_zeroed);
    leaf.grad_zeroed = leaf.grad_stale = false;
    return;
  }
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
  leaf.grad.assign_(sum_gradients(leaf.grad, grad));
}

using LeafSink = std::function<void(TensorImpl& leaf, const Tensor& grad)>;

// The node whose backward run_backward is calling, for grad_target (null elsewhere), and the
// walk's count of each node's users still to run, for completes_input_gradient.
thread_local const Node* node_in_backward = nullptr;
thread_local const std::unordered_map<Node*, int>* users_to_run = nullptr;
thread_local const std::unordered_map<Node*, Tensor>* waiting_grads = nullptr;

class NodeInBackward {
 public:
  explicit NodeInBackward(const Node* node) : previous_(node_in_backward) { node_in_backward = node; }
  ~NodeInBackward() { node_in_backward = previous_; }
  NodeInBackward(const NodeInBackward&) = delete;
  NodeInBackward& operator=(const NodeInBackward&) = delete;

 private:
  const Node* previous_;
};

void fire_grad_ready(TensorImpl& leaf) {
  for (const auto& [id, hook] : leaf.grad_ready_hooks) hook();
}

// with_targets: a run_backward, which offers grad_target to ops and calls gradient-ready hooks;
// ft::gradients does neither (it must not touch any leaf's gradient).
void walk_backward(const Tensor& root, const Tensor& grad, bool retain_graph, const LeafSink& sink,
                   bool with_targets) {
  NoGradGuard no_grad;
  if (!root.grad_fn()) {
    FT_CHECK(root.requires_grad(), "backward: the tensor does not require grad and has no history");
    sink(*root.impl(), grad);
    if (with_targets) fire_grad_ready(*root.impl());
    return;
  }
  // Count, for every node, how many edges point at it, so it runs only after all its users; and
  // for every leaf, so its gradient-ready hooks run after its last contribution.
  std::unordered_map<Node*, int> pending_users;
  std::unordered_map<TensorImpl*, int> pending_leaf_edges;
  std::vector<Node*> stack{root.grad_fn().get()};
  std::unordered_set<Node*> seen{root.grad_fn().get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->edges) {
      if (e.leaf) pending_leaf_edges[e.leaf.get()]++;
      if (!e.node) continue;
      pending_users[e.node.get()]++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  auto leaf_edge_done = [&](TensorImpl& leaf) {
    if (--pending_leaf_edges[&leaf] == 0 && with_targets) fire_grad_ready(leaf);
  };
  std::unordered_map<Node*, Tensor> grads;
  struct Published {  // for completes_input_gradient while this walk runs
    const std::unordered_map<Node*, int>* users;
    const std::unordered_map<Node*, Tensor>* grads;
    Published(const std::unordered_map<Node*, int>* u, const std::unordered_map<Node*, Tensor>* g)
        : users(users_to_run), grads(waiting_grads) {
      users_to_run = u;
      waiting_grads = g;
    }
    ~Published() {
      users_to_run = users;
      waiting_grads = grads;
    }
    Published(const Published&) = delete;
    Published& operator=(const Published&) = delete;
  } published(with_targets ? &pending_users : nullptr, with_targets ? &grads : nullptr);
  grads[root.grad_fn().get()] = grad;
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(grads[node.get()]);
    grads.erase(node.get());
    if (!g.defined()) {  // reached, but no gradient flowed into it: pass the nothing along
      for (const Edge& e : node->edges) {
        if (e.leaf) leaf_edge_done(*e.leaf);
        if (e.node && --pending_users[e.node.get()] == 0) ready.push_back(e.node);
      }
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
    std::vector<Tensor> input_grads;
    {
      NodeInBackward current(with_targets ? node.get() : nullptr);
      input_grads = pending.defined() ? node->adding(g, pending) : node->backward(g);
    }
    FT_CHECK(input_grads.size() == node->edges.size(), "backward of ", node->name, " returned ",
             input_grads.size(), " gradients for ", node->edges.size(), " inputs");
    FT_CHECK(!pending.defined() || input_grads[0].defined(), "backward of ", node->name,
             " dropped the pending gradient of its first input");
    if (!retain_graph) node->backward = nullptr, node->adding = nullptr;  // frees the saved tensors now
    // Views the op wrote itself are no longer zeros, whatever order the other inputs come in.
    for (size_t i = 0; i < node->edges.size(); ++i) {
      TensorImpl* leaf = node->edges[i].leaf.get();
      if (leaf && leaf->grad_is_view && input_grads[i].defined() && input_grads[i].impl() == leaf->grad.impl())
        leaf->grad_zeroed = leaf->grad_stale = false;
    }
    for (size_t i = 0; i < node->edges.size(); ++i) {
      const Edge& e = node->edges[i];
      if (!e.active() || !input_grads[i].defined()) {
        if (e.leaf) leaf_edge_done(*e.leaf);
        if (e.node && --pending_users[e.node.get()] == 0) ready.push_back(e.node);
        continue;
      }
      if (e.leaf) {
        sink(*e.leaf, input_grads[i]);
        leaf_edge_done(*e.leaf);
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
  walk_backward(root, grad, retain_graph, accumulate_into_leaf, /*with_targets=*/true);
}

GradTarget grad_target(size_t input) {
  const Node* node = node_in_backward;
  if (!node || input >= node->edges.size()) return {};
  TensorImpl* leaf = node->edges[input].leaf.get();
  if (!leaf || !leaf->grad_is_view) return {};
  // Overwriting is only safe when no other input of this op is the same leaf.
  int uses = 0;
  for (const Edge& e : node->edges) uses += e.leaf.get() == leaf;
  return {leaf->grad, leaf->grad_zeroed && uses == 1};
}

bool completes_input_gradient(size_t input) {
  const Node* node = node_in_backward;
  if (!node || !users_to_run || !waiting_grads || input >= node->edges.size() || !node->edges[input].node)
    return false;
  Node* const maker = node->edges[input].node.get();
  int own = 0;  // this node's edges into it, all still counted
  for (const Edge& e : node->edges) own += e.node.get() == maker;
  const auto users = users_to_run->find(maker);
  // A gradient already waiting there (from a user that ran before, not taken over by an adding
  // node) would be added to what this node returns.
  const auto waiting = waiting_grads->find(maker);
  const bool nothing_waiting = waiting == waiting_grads->end() || !waiting->second.defined();
  return users != users_to_run->end() && users->second == own && nothing_waiting;
}

GradOutput claim_leaf_grad_view(const Tensor& leaf) {
  if (!node_in_backward || !leaf.defined()) return {};
  TensorImpl* impl = leaf.impl();
  if (impl->grad_fn || !impl->grad_is_view || impl->grad.dtype() != DType::F32 || !impl->grad.is_cuda()) return {};
  const GradOutput out(impl->grad, /*add=*/!impl->grad_zeroed, /*is_view=*/true);
  impl->grad_zeroed = impl->grad_stale = false;
  return out;
}

GradOutput grad_output(size_t input, bool wanted, const Shape& shape, DType dtype, Device device, bool dense) {
  if (!wanted) return {};
  const GradTarget target = grad_target(input);
  if (target.view.defined() && target.view.dtype() == DType::F32 && target.view.is_cuda()) {
    TensorImpl* leaf = node_in_backward->edges[input].leaf.get();
    if (!dense && leaf->grad_stale) {  // a sparse write needs the zeros it leaves alone
      runtime::zero_bytes(target.view.data_ptr(), target.view.device(), target.view.nbytes());
      leaf->grad_stale = false;
    }
    return GradOutput(target.view, !target.overwrite, /*is_view=*/true);
  }
  return GradOutput(Tensor::empty(shape, dtype, device));
}

void attach_grad_view(const Tensor& leaf, const Tensor& view) {
  check_defined(leaf, "attach_grad_view", "leaf");
  check_defined(view, "attach_grad_view", "view");
  FT_CHECK(leaf.requires_grad() && !leaf.grad_fn(), "attach_grad_view: the tensor must be a leaf that requires grad");
  FT_CHECK(!leaf.impl()->grad_is_view, "attach_grad_view: the tensor already has a gradient view (one GradBuffer, "
           "i.e. one optimizer, per parameter)");
  FT_CHECK(view.shape() == leaf.shape() && is_floating(view.dtype()) && view.device() == leaf.device(),
           "attach_grad_view: view ", shape_str(view.shape()), " ", dtype_name(view.dtype()), " on ",
           view.device().str(), " for a leaf ", shape_str(leaf.shape()), " on ", leaf.device().str());
  TensorImpl* impl = leaf.impl();
  impl->grad = view;
  impl->grad_is_view = true;
  impl->grad_zeroed = true;
  impl->grad_stale = false;
}

void detach_grad_view(const Tensor& leaf) {
  check_defined(leaf, "detach_grad_view", "leaf");
  TensorImpl* impl = leaf.impl();
  if (!impl->grad_is_view) return;
  impl->grad = Tensor();
  impl->grad_is_view = false;
  impl->grad_zeroed = impl->grad_stale = false;
}

uint64_t add_grad_ready_hook(const Tensor& leaf, std::function<void()> hook) {
  check_defined(leaf, "add_grad_ready_hook", "leaf");
  FT_CHECK(leaf.requires_grad() && !leaf.grad_fn(), "add_grad_ready_hook: the tensor must be a leaf that requires grad");
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id.fetch_add(1);
  leaf.impl()->grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

bool remove_grad_ready_hook(const Tensor& leaf, uint64_t id) {
  if (!leaf.defined()) return false;
  auto& hooks = leaf.impl()->grad_ready_hooks;
  const auto it = std::find_if(hooks.begin(), hooks.end(), [id](const auto& hook) { return hook.first == id; });
  if (it == hooks.end()) return false;
  hooks.erase(it);
  return true;
}

void clear_grad_ready_hooks(const Tensor& leaf) {
  check_defined(leaf, "clear_grad_ready_hooks", "leaf");
  leaf.impl()->grad_ready_hooks.clear();
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
    accumulate(slot, g);
  }, /*with_targets=*/false);
  return out;
}

void accumulate_into(const Tensor& dst, const Tensor& src, bool overwrite, const Tensor& scale) {
  check_defined(dst, "accumulate_into", "destination");
  check_defined(src, "accumulate_into", "source");
  FT_CHECK(dst.numel() == src.numel() && dst.device() == src.device() && is_floating(src.dtype()) &&
               (dst.dtype() == DType::F32 || dst.dtype() == DType::F64),
           "accumulate_into: ", shape_str(src.shape()), " ", dtype_name(src.dtype()), " on ", src.device().str(),
           " into ", shape_str(dst.shape()), " ", dtype_name(dst.dtype()), " on ", dst.device().str(),
           " (the destination must be f32 or f64 with as many elements, on the same device)");
  FT_CHECK(!scale.defined() || (scale.numel() == 1 && scale.dtype() == DType::F32 && scale.device() == dst.device()),
           "accumulate_into: the scale must be one f32 element on ", dst.device().str());
  if (dst.numel() == 0) return;
  runtime::accumulate_elements(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), dst.device(), dst.numel(),
                              overwrite, scale.defined() ? scale.data<float>() : nullptr);
}

}  // namespace ft
