// What the norm tests share (norm_test.cpp, norm_fused_cuda_test.cpp): loops that compute the
// norms in f64, the ops under test as functions of their inputs, their shapes, and the epilogues.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "lib/kernel_mode.h"
#include "lib/ops/norm/layer_norm.h"
#include "lib/ops/norm/rms_norm.h"
#include "lib/ops/random/random.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "tests/lib/fused_test_util.h"
#include "tests/lib/test_util.h"

namespace ft::test {


/// Layer norm of each row in doubles: biased variance, eps inside the root.
inline std::vector<double> reference_layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                         const std::vector<double>& b, int64_t c, double eps) {
  std::vector<double> out(x.size());
  const size_t cols = static_cast<size_t>(c);
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* row = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (size_t j = 0; j < cols; ++j) mean += row[j];
    mean /= static_cast<double>(c);
    for (size_t j = 0; j < cols; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (size_t j = 0; j < cols; ++j) out[r * cols + j] = (row[j] - mean) * inv * w[j] + b[j];
  }
  return out;
}

/// RMS norm of each row in doubles: x / √(mean(x²) + eps) · w.
inline std::vector<double> reference_rms_norm(const std::vector<double>& x, const std::vector<double>& w, int64_t c,
                                       double eps) {
  std::vector<double> out(x.size());
  const size_t cols = static_cast<size_t>(c);
  for (size_t r = 0; r * cols < x.size(); ++r) {
    const double* row = x.data() + r * cols;
    double ms = 0.0;
    for (size_t j = 0; j < cols; ++j) ms += row[j] * row[j];
    ms /= static_cast<double>(c);
    const double inv = 1.0 / std::sqrt(ms + eps);
    for (size_t j = 0; j < cols; ++j) out[r * cols + j] = row[j] * inv * w[j];
  }
  return out;
}

enum class Op { LayerNorm, RmsNorm, AddLayerNorm, AddRmsNorm };
const Op kOps[] = {Op::LayerNorm, Op::RmsNorm, Op::AddLayerNorm, Op::AddRmsNorm};

inline const char* op_name(Op op) {
  switch (op) {
    case Op::LayerNorm: return "layer_norm";
    case Op::RmsNorm: return "rms_norm";
    case Op::AddLayerNorm: return "add_layer_norm";
    case Op::AddRmsNorm: return "add_rms_norm";
  }
  return "?";
}
inline bool is_add(Op op) { return op == Op::AddLayerNorm || op == Op::AddRmsNorm; }
inline bool is_layer(Op op) { return op == Op::LayerNorm || op == Op::AddLayerNorm; }

/// The add forms' two outputs side by side along the last dim: a random upstream gradient of
/// this is a loss that uses both sum and out.
inline Tensor both(const AddNormResult& r) { return cat({r.sum, r.out}, -1); }

/// Inputs in the order x, residual, weight, bias (residual and bias undefined where the op has
/// none). x and residual have their own offset and scale, so centring and scaling both matter.
/// The gains are of either sign and away from 0 (gain_tensor says why).
inline std::vector<Tensor> norm_inputs(Op op, const Shape& shape, Generator& gen) {
  const int64_t c = shape.back();
  return {affine(random_tensor(shape, DType::F64, kCPU, gen), 2.0, 0.5),
          is_add(op) ? affine(random_tensor(shape, DType::F64, kCPU, gen), 1.5, -0.25) : Tensor(),
          gain_tensor({c}, DType::F64, kCPU, gen), is_layer(op) ? random_tensor({c}, DType::F64, kCPU, gen) : Tensor()};
}

/// The op on norm_inputs; the add forms return both outputs (`out_only`: just out).
inline TensorFn norm_fn(Op op, bool out_only = false) {
  return [op, out_only](const std::vector<Tensor>& in) -> Tensor {
    switch (op) {
      case Op::LayerNorm: return layer_norm(in[0], in[2], in[3]);
      case Op::RmsNorm: return rms_norm(in[0], in[2]);
      case Op::AddLayerNorm: {
        const AddNormResult r = add_layer_norm(in[0], in[1], in[2], in[3]);
        return out_only ? r.out : both(r);
      }
      case Op::AddRmsNorm: {
        const AddNormResult r = add_rms_norm(in[0], in[1], in[2]);
        return out_only ? r.out : both(r);
      }
    }
    return Tensor();
  };
}

// N = 1 with an odd C, odd N and C, a 3-D x, large rows (C = 8192). Few columns are
// ill-conditioned for x's gradient (composites_test.cpp says why), so the small shapes start at
// C = 8, except C = 1 for layer_norm, where the row normalizes to exactly zero and x's gradient
// is exactly zero. (rms_norm at C = 1 gives ±w, and x's gradient w·eps/(x² + eps)^1.5 is a
// difference of two terms near 1: pure cancellation, so it is left out.)
inline std::vector<Shape> device_shapes(Op op) {
  std::vector<Shape> shapes{{1, 767}, {37, 767}, {2, 5, 64}, {4, 8192}, {1, 8}};
  if (is_layer(op)) shapes.push_back({3, 1});
  return shapes;
}

// layer_norm_act_dropout: the norm with an activation and Philox dropout after it. The mask is
// keyed on (seed, offset, element), so the CPU f64 reference draws the same one.
// Offsets: a multiple of 8 (what PhiloxCounter hands out: a pack of 8 is one Philox call) and a
// multiple of 4 only (the kernels' general path).
struct Epilogue {
  Activation act;
  double p;
  uint64_t offset = 8 * 99;  // a multiple of 8, as PhiloxCounter hands out
};
inline const Epilogue kEpilogues[] = {
    {Activation::GELU, 0.1, 8 * 99}, {Activation::None, 0.3, 4 * 99}, {Activation::ReLU, 0.0, 8 * 99}};

inline TensorFn norm_act_dropout(const Epilogue& e) {
  return [e](const std::vector<Tensor>& in) {
    return layer_norm_act_dropout(in[0], in[1], in[2], e.act, e.p, 17, philox_offset(e.offset, in[0].device()));
  };
}

// The plain and add forms' fused backward takes x̂ = (y − b)/w from the saved output (1/w held
// per thread for f32 and unpacked rows, taken per pack for packed bf16). Widths that reach
// every kernel configuration: warp rows packed (96, 200; 768 in bf16), block rows packed (768
// and 1000 in f32, 2048 in bf16) and unpacked (4097); 37 rows leave a block's last warps idle.
inline const int64_t kOddWidths[] = {96, 200, 768, 1000, 2048, 4097};

}  // namespace ft::test
