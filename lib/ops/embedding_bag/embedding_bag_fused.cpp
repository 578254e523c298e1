// embedding_bag's fused path (CUDA builds only): the pooled rows in one kernel forward; backward
// applies the sparse update (SGD or Adagrad) to the rows reached, with no dense table gradient.
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/embedding_bag/embedding_bag_cuda.h"

namespace ft::cuda {

Tensor embedding_bag_fused(const Tensor& weight, const Tensor& row_offsets, const Tensor& ids, const Tensor& offsets,
                           const Tensor& per_sample_weights, const EmbeddingBagOptions& options) {
  const DType out_dtype = options.out_dtype.value_or(weight.dtype());
  const bool weight_grad = needs_grad({&weight}), psw_grad = needs_grad({&per_sample_weights});
  const Shape shape = embedding_bag_shape(weight, row_offsets, offsets);
  Tensor out = Tensor::empty(shape, out_dtype, weight.device());
  embedding_bag_forward(weight, row_offsets, ids, offsets, per_sample_weights, options.mode, out);
  if (!weight_grad) return out;
  return record(
      "embedding_bag", out, {weight, per_sample_weights},
      [weight = weight.detach(), row_offsets, ids = ids.detach(), offsets = offsets.detach(),
       psw = per_sample_weights.defined() ? per_sample_weights.detach() : Tensor(), options, psw_grad](const Tensor& g) {
        const Tensor grad = g.reshape({g.size(0) * g.size(1), g.size(2)});
        Tensor dpsw = psw_grad ? Tensor::empty({ids.numel()}, DType::F32, g.device()) : Tensor();
        Tensor all_ids = ids, all_offsets = offsets, all_grads = grad;
        if (options.update->exchange) {
          // The same on every rank (the model's), so every rank stops here alike.
          FT_CHECK(!psw.defined(), "embedding_bag: per-sample weights do not train data-parallel");
          options.update->exchange(all_ids, all_offsets, all_grads);
        }
        embedding_bag_backward_update(all_grads, weight, row_offsets, all_ids, all_offsets, psw, options.mode,
                                      *options.update, dpsw);
        return std::vector<Tensor>{Tensor(), dpsw};
      });
}

}  // namespace ft::cuda
