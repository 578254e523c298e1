#include "layers/embedding.h"

#include "lib/ops/embedding/embedding.h"

namespace ft {

Embedding::Embedding(int64_t rows, int64_t dim, Generator& gen, double std) {
  weight_ = register_parameter("weight", Tensor::normal({rows, dim}, gen, std));
}

Tensor Embedding::forward(const Tensor& ids) { return token_embedding(ids, weight_); }

}  // namespace ft
