// Module: named parameters (trainable or frozen) and children, train/eval mode, and a
// name -> tensor state dict, written the libtorch way (register_parameter / register_module).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// What load_state_dict did with each name: `loaded` were copied; `missing` are parameters the
/// state lacks, `unexpected` are state entries no parameter has, and each `mismatched` entry
/// reads "name: got [a, b], expected [c, d]". Every list is sorted by name.
struct LoadReport {
  std::vector<std::string> loaded, missing, unexpected, mismatched;
  /// True when every parameter was loaded and nothing was left over.
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  /// One line per non-empty problem list, e.g. "2 missing: a, b" (empty when ok()).
  std::string str() const;
};

class Module {
 public:
  virtual ~Module() = default;
  /// The forward pass of single-input modules (Sequential chains these).
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// All parameters, frozen ones and children's included, in registration order.
  std::vector<Tensor> parameters() const;
  /// Same, with dotted names ("0.weight", "fc.bias").
  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "") const;
  /// The parameters that require a gradient (what an optimizer should get), in the same order.
  std::vector<Tensor> trainable_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_trainable_parameters(const std::string& prefix = "") const;

  /// Freezes (false) or unfreezes (true) every parameter, children's included. Flips
  /// requires_grad on the existing tensors, so an optimizer or graph holding them sees the
  /// change; freezing also drops the parameter's .grad().
  void set_trainable(bool trainable);
  /// The same for the parameter with dotted name `name`, or for every parameter under the
  /// prefix `name + "."` (a child module, e.g. "h.0.attn"). A name matching nothing is an ft::Error.
  void set_trainable(const std::string& name, bool trainable);

  /// Every parameter, frozen or trainable, detached (sharing storage), by dotted name.
  std::map<std::string, Tensor> state_dict() const;
  /// Model parallelism: this module's parameters (children's included) are this rank's own
  /// shard, different on every rank, so data parallelism neither broadcasts nor compares them.
  void set_rank_local() { rank_local_ = true; }
  /// state_dict() without the parameters of rank-local modules: what every replica holds alike.
  std::map<std::string, Tensor> replicated_state_dict() const;
  /// Whether some module in this tree is rank-local.
  bool has_rank_local_state() const;
  /// Copies values in place (dtype converted, any device) into the parameters named in `state`.
  /// Strict: anything missing, unexpected or mis-shaped throws one ft::Error listing all of
  /// them, and nothing is loaded. Non-strict: every entry matching a parameter in name and
  /// shape is loaded and the rest is reported, never thrown.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves and converts every parameter in place, keeping tensor identity (call before
  /// building the optimizer). Parameters registered with keep_dtype move without converting.
  void to(Device device, DType dtype);
  int64_t parameter_count() const;
  int64_t trainable_parameter_count() const;

 protected:
  /// Adds `tensor` as a parameter, requiring grad when trainable and not when frozen. With
  /// keep_dtype, to() moves it but keeps its dtype: sparse embedding tables and their optimizer
  /// accumulators stay f32 under a bf16 model (their updates are too small for bf16).
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool trainable = true, bool keep_dtype = false);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }
  /// Puts `module` in the place of the child registered as `name` (a layer wrapped by an
  /// adapter keeps its name and position); an unknown name is an ft::Error.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<bool> keep_dtype_;  // per entry of params_
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool rank_local_ = false;  // set_rank_local
};

}  // namespace ft
