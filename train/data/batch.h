// A batch is a set of named tensors ("inputs" and "targets" for a language model, "images" and
// "labels" for a classifier, dense features, sparse ids and labels for a recommender), and the
// loss is a function of (model, batch): one Trainer then runs every model.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include "layers/module.h"
#include "lib/tensor.h"

namespace ft {

class Batch {
 public:
  Batch() = default;
  Batch(std::initializer_list<std::pair<const std::string, Tensor>> tensors) : tensors_(tensors) {}

  /// The tensor named `name`. A missing name is an ft::Error naming it and the names present.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Adds or replaces the tensor named `name`.
  void set(const std::string& name, Tensor tensor) { tensors_[name] = std::move(tensor); }

  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  /// In name order.
  auto begin() const { return tensors_.begin(); }
  auto end() const { return tensors_.end(); }
  /// The leading dimension of the first tensor in name order (the rows of a row batch); 0 when
  /// the batch is empty or that tensor is a scalar.
  int64_t rows() const;
  /// The device of the first tensor (the CPU for an empty batch).
  Device device() const;

 private:
  std::map<std::string, Tensor> tensors_;
};

/// The loss of one (micro-)batch: a [] tensor that backward() starts from.
using LossFn = std::function<Tensor(Module& model, const Batch& batch)>;

}  // namespace ft
