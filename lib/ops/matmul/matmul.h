// Matrix product: Eigen on the CPU, cuBLASLt on CUDA.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "lib/tensor.h"

namespace ft {

/// op(a) @ op(b), where op transposes the last two dims when asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b).
/// Either both have the same leading (batch) dims, or b is 2-D and is shared by every batch.
/// Result: alpha · op(a) @ op(b), [..., M, N], same dtype (f32/f64/bf16), accumulation in f32
/// (f64 for f64); alpha scales in that precision before the one rounding to the result's dtype
/// (cuBLAS's alpha, as attention scales its scores by 1/√HS).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false, double alpha = 1.0);

/// Inside a backward function that run_backward is calling: alpha · firstᵀ · second (first
/// [K, M], second [K, N], K the batch's rows folded together), the gradient of the node's 2-D
/// weight input `input`. Straight into that input's f32 gradient view on CUDA when it has one
/// (written or added; autograd then adds nothing), else a fresh product in first's dtype.
Tensor weight_gradient_product(const Tensor& first, const Tensor& second, size_t input, double alpha = 1.0);

/// Selective recomputation's hook (lib/ops/recompute/recompute.h): while a MatmulStash is in
/// scope on this thread, every product of a 2-D weight (b 2-D: a linear layer's, not attention's
/// batched ones) either appends its output to the stash (saving) or takes the stash's next output
/// instead of computing it (replaying), recording its backward as usual. A replay must make the
/// products of the saving run, in order, with the same shapes: a mismatch is an ft::Error.
class MatmulStash {
 public:
  enum class Mode { Save, Replay };
  /// The outputs kept between the saving run and the replay.
  struct Outputs {
    std::vector<Tensor> products;
  };
  MatmulStash(Outputs& outputs, Mode mode);
  ~MatmulStash();
  MatmulStash(const MatmulStash&) = delete;
  MatmulStash& operator=(const MatmulStash&) = delete;
  /// The stash in scope on this thread, or null.
  static MatmulStash* active();
  /// Saving: keeps `out`. Replaying: the next kept output, which must have out_shape.
  Tensor take(const Shape& out_shape, const std::function<Tensor()>& compute);
  /// A 2-D weight's product made by an op of its own (a fused linear): through the stash in
  /// scope (take), else compute() as it is.
  static Tensor product(const Shape& out_shape, const std::function<Tensor()>& compute);

 private:
  Outputs& outputs_;
  Mode mode_;
  size_t next_ = 0;
  MatmulStash* previous_;
};

/// Which cuBLASLt algorithm a CUDA product runs (the matmul primitive and the fused linears):
/// off (the default), its heuristic's first choice; on (set_gemm_autotune(true), or
/// FT_GEMM_AUTOTUNE=1 in the environment), the fastest of its first 8 candidates, timed once per
/// product configuration when it is first met (first met inside graph capture, where nothing can
/// be timed, it keeps the heuristic's choice for the rest of the process). The choice then
/// depends on timings: two processes may choose differently, and their results differ in the
/// last bits (a run resumed in a new process is not bit-identical to the run it continues).
void set_gemm_autotune(bool on);
bool gemm_autotune();
/// With autotuning on, a file of tuned choices (lib/gemm_tuning.h; set_gemm_tuning_file(path),
/// or FT_GEMM_TUNING_FILE=path in the environment; empty: none, the default): a configuration
/// recorded there runs the recorded algorithm without timing (even when first met inside graph
/// capture), and one timed here is added to it. Processes sharing the file then choose alike
/// and their results are bit-identical. It holds choices for one device and cuBLASLt version;
/// a file written for others is started over.
/// Naming a file, even the same one again, has the next product read it anew.
void set_gemm_tuning_file(const std::string& path);
std::string gemm_tuning_file();
/// Counts set_gemm_tuning_file calls: lib/ops/matmul/matmul.cu reads the file again when it changes.
uint64_t gemm_tuning_file_generation();

}  // namespace ft
