// Embedding: rows of a [V, C] table picked by integer ids.
#pragma once
#include "layers/module.h"

namespace ft {

class Embedding : public Module {
 public:
  /// Weights drawn from N(0, std²).
  Embedding(int64_t rows, int64_t dim, Generator& gen, double std = 0.02);
  /// ids [...] (i32/i64) -> [..., C].
  Tensor forward(const Tensor& ids) override;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

}  // namespace ft
