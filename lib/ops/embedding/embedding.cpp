#include "lib/ops/embedding/embedding.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/embedding/embedding_cuda.h"
#include "lib/ops/shape_ops/shape_ops.h"

namespace ft {

Tensor token_position_embedding_composite(const Tensor& ids, const Tensor& tokens, const Tensor& positions) {
  const Tensor steps = Tensor::arange(ids.size(1), DType::I64, ids.device());
  return gather_rows(tokens, ids) + gather_rows(positions, steps);  // [B, T, C] + [T, C]
}

Tensor token_position_embedding(const Tensor& ids, const Tensor& tokens, const Tensor& positions) {
  check_defined(ids, "token_position_embedding", "ids");
  check_defined(tokens, "token_position_embedding", "tokens");
  check_defined(positions, "token_position_embedding", "positions");
  FT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I32 || ids.dtype() == DType::I64),
           "token_position_embedding: ids must be [B, T] i32 or i64, got ", shape_str(ids.shape()), " ",
           dtype_name(ids.dtype()));
  FT_CHECK(tokens.dim() == 2 && positions.dim() == 2 && positions.size(1) == tokens.size(1),
           "token_position_embedding: tokens [V, C] and positions [P, C] must share C, got ",
           shape_str(tokens.shape()), " and ", shape_str(positions.shape()));
  FT_CHECK(positions.size(0) >= ids.size(1), "token_position_embedding: ", ids.size(1), " positions asked for, the ",
           "table has ", positions.size(0));
  FT_CHECK(tokens.dtype() == positions.dtype() && tokens.device() == positions.device() &&
               ids.device() == tokens.device(),
           "token_position_embedding: ids, tokens and positions must share a device, and the tables a dtype");
  const bool fused = use_fused(tokens) && (tokens.dtype() == DType::F32 || tokens.dtype() == DType::BF16) &&
                     ids.numel() > 0;
  if constexpr (kCudaBuild)
    if (fused) return cuda::token_position_embedding_fused(ids, tokens, positions);
  return token_position_embedding_composite(ids, tokens, positions);
}

Tensor token_embedding_composite(const Tensor& ids, const Tensor& tokens) { return gather_rows(tokens, ids); }

Tensor token_embedding(const Tensor& ids, const Tensor& tokens) {
  check_defined(ids, "token_embedding", "ids");
  check_defined(tokens, "token_embedding", "tokens");
  FT_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "token_embedding: ids must be i32 or i64, got ",
           dtype_name(ids.dtype()));
  FT_CHECK(tokens.dim() == 2, "token_embedding: tokens must be [V, C], got ", shape_str(tokens.shape()));
  FT_CHECK(ids.device() == tokens.device(), "token_embedding: ids on ", ids.device().str(), ", tokens on ",
           tokens.device().str());
  const bool fused = use_fused(tokens) && (tokens.dtype() == DType::F32 || tokens.dtype() == DType::BF16) &&
                     ids.numel() > 0;
  if constexpr (kCudaBuild)
    if (fused) return cuda::token_embedding_fused(ids, tokens);
  return token_embedding_composite(ids, tokens);
}

}  // namespace ft
