// One cuBLASLt product, column-major, with an optional epilogue. The matmul primitive and the
// fused linear both go through it; algorithm choices are cached per configuration.
#pragma once
#include <cublasLt.h>

#include <optional>

#include "lib/dtype.h"

namespace ft::cuda {

/// D[m, n] = alpha · op(A)[m, k] · op(B)[k, n] (column-major, lda/ldb/ldd the leading dims), repeated
/// over `batch` matrices with the given element strides (stride_b 0 shares B).
struct LtGemm {
  DType dtype = DType::F32;  // of A and B, and of D unless out_dtype says otherwise
  /// D's dtype when it differs from A and B's: f32 sums of bf16 products (weight gradients
  /// written straight into their f32 GradBuffer views). A BGRAD epilogue's vector then is f32 too.
  std::optional<DType> out_dtype;
  DType d_dtype() const { return out_dtype.value_or(dtype); }
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  void* d = nullptr;
  int64_t ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // read for BIAS epilogues, written for BGRAD epilogues
  void* aux = nullptr;   // GELU_AUX: pre-activation written; DGELU: read
  int64_t ld_aux = 0;
  bool accumulate = false;  // D += product (beta = 1) instead of D = product
  /// With accumulate: the addend C when it is not D itself (D = product + C, C laid out as D),
  /// so a sum into a fresh buffer needs no copy first.
  const void* c = nullptr;
  double alpha = 1.0;       // the product's scale (LoRA's s·B·A, s·dYᵀ·u)
};

void run_gemm(const LtGemm& g);
/// run_gemm, except that a configuration cuBLASLt has no algorithm for returns false (nothing
/// enqueued) instead of throwing: for epilogues that have a plain fallback.
bool try_run_gemm(const LtGemm& g);

}  // namespace ft::cuda
