#include "layers/module.h"

#include "lib/autograd.h"
#include "lib/error.h"

namespace ft {

Tensor Module::forward(const Tensor&) { FT_FAIL("Module::forward: this module takes no single-tensor input"); }

Tensor& Module::register_parameter(const std::string& name, Tensor tensor) {
  check_defined(tensor, "register_parameter", name.c_str());
  tensor.requires_grad_(true);
  params_.emplace_back(name, tensor);
  return params_.back().second;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (auto& [name, child] : children_) {
    auto sub = child->named_parameters(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out.emplace(name, t.detach());
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto named = named_parameters();
  FT_CHECK(state.size() == named.size(), "load_state_dict: ", state.size(), " tensors given for ", named.size(),
           " parameters");
  for (auto& [name, p] : named) {
    auto it = state.find(name);
    FT_CHECK(it != state.end(), "load_state_dict: missing parameter '", name, "'");
    FT_CHECK(it->second.shape() == p.shape(), "load_state_dict: '", name, "' has shape ",
             shape_str(it->second.shape()), ", expected ", shape_str(p.shape()));
    p.copy_(it->second.to(p.device()));
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device, DType dtype) {
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    Tensor moved = p.detach().to(dtype).to(device);
    TensorImpl* impl = p.impl();
    impl->storage = moved.impl()->storage;
    impl->byte_offset = moved.impl()->byte_offset;
    impl->dtype = dtype;
    impl->grad = Tensor();
  }
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

}  // namespace ft
