// Module: named parameters and children, train/eval mode, and a name -> tensor state dict,
// written the libtorch way (register_parameter / register_module).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/tensor.h"

namespace ft {

class Module {
 public:
  virtual ~Module() = default;
  /// The forward pass of single-input modules (Sequential chains these).
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// All parameters, children's included, in registration order.
  std::vector<Tensor> parameters() const;
  /// Same, with dotted names ("0.weight", "fc.bias").
  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "") const;
  std::map<std::string, Tensor> state_dict() const;
  /// Copies values (shape must match) into the parameters named in `state`; unknown or missing
  /// names are an ft::Error.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves and converts every parameter in place, keeping tensor identity (call before
  /// building the optimizer).
  void to(Device device, DType dtype);
  int64_t parameter_count() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace ft
