#include "layers/embedding.h"

#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

Embedding::Embedding(int64_t rows, int64_t dim, Generator& gen, double std) {
  weight_ = register_parameter("weight", Tensor::normal({rows, dim}, gen, std));
}

Tensor Embedding::forward(const Tensor& ids) { return gather_rows(weight_, ids); }

}  // namespace ft
