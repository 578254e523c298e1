#include "layers/module.h"

#include <algorithm>

#include "lib/autograd.h"
#include "lib/error.h"

namespace ft {

Tensor Module::forward(const Tensor&) { FT_FAIL("Module::forward: this module takes no single-tensor input"); }

namespace {

void append_list(std::string& out, const char* what, const std::vector<std::string>& names) {
  if (names.empty()) return;
  if (!out.empty()) out += "\n";
  out += std::to_string(names.size()) + " " + what + ": ";
  // "; " because a mismatched entry's shapes hold commas.
  for (size_t i = 0; i < names.size(); ++i) out += (i ? "; " : "") + names[i];
}

void set_requires_grad(Tensor& p, bool trainable) {
  p.requires_grad_(trainable);
  if (!trainable) p.zero_grad();
}

}  // namespace

std::string LoadReport::str() const {
  std::string out;
  append_list(out, "missing", missing);
  append_list(out, "unexpected", unexpected);
  append_list(out, "mis-shaped", mismatched);
  return out;
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool trainable, bool keep_dtype) {
  check_defined(tensor, "register_parameter", name.c_str());
  tensor.requires_grad_(trainable);
  params_.emplace_back(name, tensor);
  keep_dtype_.push_back(keep_dtype);
  return params_.back().second;
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  for (auto& [child_name, child] : children_)
    if (child_name == name) {
      child = std::move(module);
      return;
    }
  FT_FAIL("Module::replace_module: no child named '", name, "'");
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

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_trainable_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_trainable_parameters(const std::string& prefix) const {
  auto out = named_parameters(prefix);
  std::erase_if(out, [](const auto& named) { return !named.second.requires_grad(); });
  return out;
}

void Module::set_trainable(bool trainable) {
  for (auto& [name, p] : named_parameters()) set_requires_grad(p, trainable);
}

void Module::set_trainable(const std::string& name, bool trainable) {
  const std::string child_prefix = name + ".";
  bool found = false;
  for (auto& [full, p] : named_parameters()) {
    if (full != name && !full.starts_with(child_prefix)) continue;
    set_requires_grad(p, trainable);
    found = true;
  }
  FT_CHECK(found, "set_trainable: no parameter is named '", name, "' or starts with '", child_prefix, "'");
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out.emplace(name, t.detach());
  return out;
}

std::map<std::string, Tensor> Module::replicated_state_dict() const {
  std::map<std::string, Tensor> out;
  if (rank_local_) return out;
  for (auto& [name, t] : params_) out.emplace(name, t.detach());
  for (auto& [name, child] : children_)
    for (auto& [sub, t] : child->replicated_state_dict()) out.emplace(name + "." + sub, t);
  return out;
}

bool Module::has_rank_local_state() const {
  if (rank_local_ && !named_parameters().empty()) return true;
  for (auto& [name, child] : children_)
    if (child->has_rank_local_state()) return true;
  return false;
}

LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  // Everything is checked before anything is copied, so a strict failure leaves the model as it was.
  LoadReport report;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (parameter, source)
  std::map<std::string, Tensor> left = state;
  for (auto& [name, p] : named_parameters()) {
    auto it = left.find(name);
    if (it == left.end()) {
      report.missing.push_back(name);
      continue;
    }
    if (it->second.shape() != p.shape()) {
      report.mismatched.push_back(name + ": got " + shape_str(it->second.shape()) + ", expected " +
                                  shape_str(p.shape()));
    } else {
      report.loaded.push_back(name);
      copies.emplace_back(p, it->second);
    }
    left.erase(it);
  }
  for (auto& [name, t] : left) report.unexpected.push_back(name);
  for (auto* names : {&report.loaded, &report.missing, &report.mismatched}) std::sort(names->begin(), names->end());
  FT_CHECK(!strict || report.ok(), "load_state_dict: the state does not match the model, so nothing was loaded "
           "(strict)\n", report.str());
  NoGradGuard no_grad;
  for (auto& [p, src] : copies) p.copy_(src.to(p.device()));
  return report;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device, DType dtype) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    const DType target = keep_dtype_[i] ? p.dtype() : dtype;
    Tensor moved = p.detach().to(target).to(device);
    TensorImpl* impl = p.impl();
    impl->storage = moved.impl()->storage;
    impl->byte_offset = moved.impl()->byte_offset;
    impl->dtype = target;
    impl->grad = Tensor();
  }
  for (auto& [name, child] : children_) child->to(device, dtype);
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

int64_t Module::trainable_parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : trainable_parameters()) n += p.numel();
  return n;
}

}  // namespace ft
