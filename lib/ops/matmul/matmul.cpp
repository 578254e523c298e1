#include "lib/ops/matmul/matmul.h"

#include <Eigen/Core>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/ops/matmul/matmul_cuda.h"
#include "lib/ops/reduce/reduce.h"
#include "lib/ops/shape_ops/shape_ops.h"
#include "lib/runtime.h"

namespace ft {

namespace {

struct MatmulDims {
  int64_t batch, m, n, k;
  bool b_batched;
  Shape out_shape;
};

MatmulDims check_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_defined(a, "matmul", "a");
  check_defined(b, "matmul", "b");
  FT_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: a ", dtype_name(a.dtype()), " vs b ", dtype_name(b.dtype()));
  FT_CHECK(a.device() == b.device(), "matmul: devices differ: a on ", a.device().str(), ", b on ", b.device().str());
  FT_CHECK(is_floating(a.dtype()), "matmul: expected a floating dtype, got ", dtype_name(a.dtype()));
  FT_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: both operands need at least 2 dims, got a ", shape_str(a.shape()),
           " and b ", shape_str(b.shape()));
  MatmulDims d;
  d.m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  d.n = trans_b ? b.size(-2) : b.size(-1);
  FT_CHECK(ka == kb, "matmul: inner dims differ: a ", shape_str(a.shape()), (trans_a ? "ᵀ" : ""), " @ b ",
           shape_str(b.shape()), (trans_b ? "ᵀ" : ""), " (", ka, " vs ", kb, ")");
  d.k = ka;
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  d.b_batched = b.dim() > 2;
  FT_CHECK(!d.b_batched || batch_a == batch_b, "matmul: batch dims differ: a ", shape_str(a.shape()), " vs b ",
           shape_str(b.shape()), " (b must have a's batch dims or be 2-D)");
  d.batch = shape_numel(batch_a);
  d.out_shape = batch_a;
  d.out_shape.push_back(d.m);
  d.out_shape.push_back(d.n);
  return d;
}

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class A>
void eigen_product(const A* pa, const A* pb, A* pc, const MatmulDims& d, bool trans_a, bool trans_b, double alpha) {
  for (int64_t i = 0; i < d.batch; ++i) {
    Eigen::Map<const RowMajor<A>> ma(pa + i * d.m * d.k, trans_a ? d.k : d.m, trans_a ? d.m : d.k);
    Eigen::Map<const RowMajor<A>> mb(pb + (d.b_batched ? i * d.k * d.n : 0), trans_b ? d.n : d.k, trans_b ? d.k : d.n);
    Eigen::Map<RowMajor<A>> mc(pc + i * d.m * d.n, d.m, d.n);
    if (trans_a && trans_b) mc.noalias() = ma.transpose() * mb.transpose();
    else if (trans_a) mc.noalias() = ma.transpose() * mb;
    else if (trans_b) mc.noalias() = ma * mb.transpose();
    else mc.noalias() = ma * mb;
    if (alpha != 1.0) mc *= static_cast<A>(alpha);
  }
}

Tensor matmul_raw(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha) {
  const MatmulDims d = check_matmul(a, b, trans_a, trans_b);
  Tensor out = Tensor::empty(d.out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) cuda::matmul(a, b, out, d.batch, d.m, d.n, d.k, trans_a, trans_b, d.b_batched, false, alpha);
    return out;
  }
  switch (a.dtype()) {
    case DType::F32: eigen_product(a.data<float>(), b.data<float>(), out.data<float>(), d, trans_a, trans_b, alpha); break;
    case DType::F64: eigen_product(a.data<double>(), b.data<double>(), out.data<double>(), d, trans_a, trans_b, alpha); break;
    default: {  // bf16 storage: compute in f32, round once
      Tensor af = cast(a.detach(), DType::F32), bf = cast(b.detach(), DType::F32);
      Tensor of = Tensor::empty(d.out_shape, DType::F32, kCPU);
      eigen_product(af.data<float>(), bf.data<float>(), of.data<float>(), d, trans_a, trans_b, alpha);
      out = cast(of, a.dtype());
    }
  }
  return out;
}

}  // namespace

namespace {
thread_local MatmulStash* active_stash = nullptr;
}  // namespace

MatmulStash::MatmulStash(Outputs& outputs, Mode mode) : outputs_(outputs), mode_(mode), previous_(active_stash) {
  active_stash = this;
}
MatmulStash::~MatmulStash() { active_stash = previous_; }
MatmulStash* MatmulStash::active() { return active_stash; }
Tensor MatmulStash::product(const Shape& out_shape, const std::function<Tensor()>& compute) {
  return active_stash ? active_stash->take(out_shape, compute) : compute();
}

Tensor MatmulStash::take(const Shape& out_shape, const std::function<Tensor()>& compute) {
  // The stash holds its own handles (detach: the same memory, no history), so that a node the
  // replay records on the tensor it returns never lands on the first run's output.
  if (mode_ == Mode::Save) {
    const Tensor out = compute();
    outputs_.products.push_back(out.detach());
    return out;
  }
  FT_CHECK(next_ < outputs_.products.size(), "recompute: the replay made more products than the first run's ",
           outputs_.products.size());
  const Tensor& kept = outputs_.products[next_++];
  FT_CHECK(kept.shape() == out_shape, "recompute: product ", next_, " of the replay is ", shape_str(out_shape),
           ", the first run's was ", shape_str(kept.shape()));
  return kept.detach();
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha) {
  auto compute = [&] { return matmul_raw(a, b, trans_a, trans_b, alpha); };
  Tensor out = b.dim() == 2 ? MatmulStash::product(check_matmul(a, b, trans_a, trans_b).out_shape, compute) : compute();
  if (!needs_grad({&a, &b})) return out;
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor sa = gb ? a.detach() : Tensor();
  Tensor sb = ga ? b.detach() : Tensor();
  const bool shared_b = b.dim() == 2 && a.dim() > 2;
  return record("matmul", out, {a, b}, [sa, sb, ga, gb, trans_a, trans_b, shared_b, alpha, shape_b = b.shape()](const Tensor& g) {
    Tensor grad_a, grad_b;
    if (ga) {
      Tensor d_op_a = matmul(g, sb, false, !trans_b, alpha);  // alpha · dC · op(B)ᵀ
      grad_a = trans_a ? transpose(d_op_a) : d_op_a;
    }
    if (gb) {
      if ((shared_b || (sa.dim() == 2 && shape_b.size() == 2)) && !trans_a) {
        // One B for every batch: fold the batch into the rows, one product instead of a sum.
        Tensor a2 = sa.reshape({-1, sa.size(-1)});
        Tensor g2 = g.reshape({-1, g.size(-1)});
        grad_b = trans_b ? weight_gradient_product(g2, a2, 1, alpha) : weight_gradient_product(a2, g2, 1, alpha);
      } else {
        Tensor per_batch = trans_b ? matmul(g, sa, true, trans_a, alpha) : matmul(sa, g, !trans_a, false, alpha);
        grad_b = shared_b ? sum_to(per_batch, shape_b) : per_batch;
      }
    }
    return std::vector<Tensor>{grad_a, grad_b};
  });
}

Tensor weight_gradient_product(const Tensor& first, const Tensor& second, size_t input, double alpha) {
  const GradTarget target = grad_target(input);
  if (target.view.defined() && target.view.is_cuda() && target.view.dtype() == DType::F32) {
    // f32 out, written (beta = 0) or added (beta = 1): no gradient in first's dtype for autograd to add.
    if constexpr (kCudaBuild)
      cuda::matmul(first, second, target.view, 1, first.size(1), second.size(1), first.size(0), true, false, false,
                   !target.overwrite, alpha);
    return target.view;
  }
  return matmul(first, second, true, false, alpha);
}

namespace {
std::atomic<bool>& autotune_setting() {
  static std::atomic<bool> on{runtime::env_switch("FT_GEMM_AUTOTUNE")};
  return on;
}
}  // namespace

void set_gemm_autotune(bool on) { autotune_setting() = on; }
bool gemm_autotune() { return autotune_setting(); }

namespace {
std::mutex tuning_file_mutex;
std::string& tuning_file_setting() {
  static std::string path = [] {
    const char* value = std::getenv("FT_GEMM_TUNING_FILE");
    return std::string(value ? value : "");
  }();
  return path;
}
std::atomic<uint64_t> tuning_file_generation{0};
}  // namespace

void set_gemm_tuning_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(tuning_file_mutex);
  tuning_file_setting() = path;
  ++tuning_file_generation;
}
uint64_t gemm_tuning_file_generation() { return tuning_file_generation; }
std::string gemm_tuning_file() {
  std::lock_guard<std::mutex> lock(tuning_file_mutex);
  return tuning_file_setting();
}

}  // namespace ft
