#include "lib/ops/softmax/softmax.h"

#include <cmath>
#include <limits>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/kernel_mode.h"
#include "lib/ops/softmax/softmax_cuda.h"

namespace ft {

namespace {

void check_softmax(const char* op, const Tensor& x, DType dtype) {
  check_defined(x, op, "x");
  FT_CHECK(is_floating(x.dtype()), op, ": expected a floating dtype, got ", dtype_name(x.dtype()));
  FT_CHECK(x.dim() >= 1, op, ": expected at least one dim, got a scalar");
  FT_CHECK(dtype == x.dtype() || (x.dtype() == DType::BF16 && dtype == DType::F32), op, ": the result is ",
           dtype_name(x.dtype()), " (or f32 for bf16 input), not ", dtype_name(dtype));
}

// The CPU rows in f64: the reference the CUDA kernels are tested against.
void cpu_forward(const Tensor& x, const Tensor& y, bool log) {
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  cpu::dispatch_floating(x.dtype(), "softmax", [&](auto in_tag) {
    using In = decltype(in_tag);
    cpu::dispatch_floating(y.dtype(), "softmax", [&](auto out_tag) {
      using Out = decltype(out_tag);
      const In* in = x.data<In>();
      Out* out = y.data<Out>();
#pragma omp parallel for if (rows * cols > 65536)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t base = r * cols;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < cols; ++c) {
          const double v = cpu::load(in, base + c);
          m = v > m || v != v ? v : m;
        }
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp(cpu::load(in, base + c) - m);
        for (int64_t c = 0; c < cols; ++c) {
          const double shifted = cpu::load(in, base + c) - m;
          cpu::store(out, base + c, log ? shifted - std::log(s) : std::exp(shifted) / s);
        }
      }
    });
  });
}

void cpu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  const int64_t cols = y.size(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  cpu::dispatch_floating(y.dtype(), "softmax backward", [&](auto out_tag) {
    using Out = decltype(out_tag);
    cpu::dispatch_floating(dx.dtype(), "softmax backward", [&](auto in_tag) {
      using In = decltype(in_tag);
      const Out* py = y.data<Out>();
      const Out* pg = dy.data<Out>();
      In* pdx = dx.data<In>();
#pragma omp parallel for if (rows * cols > 65536)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t base = r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c)
          s += static_cast<double>(cpu::load(pg, base + c)) * (log ? 1.0 : cpu::load(py, base + c));
        for (int64_t c = 0; c < cols; ++c) {
          const double yv = cpu::load(py, base + c), g = cpu::load(pg, base + c);
          cpu::store(pdx, base + c, log ? g - std::exp(yv) * s : yv * (g - s));
        }
      }
    });
  });
}

Tensor softmax_op(const char* op, const Tensor& x, DType dtype, bool log) {
  check_softmax(op, x, dtype);
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  if (x.numel() > 0) {
    if (x.is_cuda()) {
      if constexpr (kCudaBuild) cuda::softmax_forward(x, y, log);
    } else {
      cpu_forward(x, y, log);
    }
  }
  if (!needs_grad({&x})) return y;
  return record(op, y, {x}, [saved_y = y.detach(), in_dtype = x.dtype(), log](const Tensor& g) {
    FT_CHECK(g.dtype() == saved_y.dtype(), log ? "log_softmax" : "softmax", " backward: gradient is ",
             dtype_name(g.dtype()), ", the output ", dtype_name(saved_y.dtype()));
    Tensor dx = Tensor::empty(saved_y.shape(), in_dtype, saved_y.device());
    if (dx.numel() > 0) {
      if (dx.is_cuda()) {
        if constexpr (kCudaBuild) cuda::softmax_backward(saved_y, g, dx, log);
      } else {
        cpu_backward(saved_y, g, dx, log);
      }
    }
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, DType dtype) { return softmax_op("softmax", x, dtype, false); }
Tensor softmax(const Tensor& x) {
  check_defined(x, "softmax", "x");
  return softmax(x, x.dtype());
}
Tensor log_softmax(const Tensor& x, DType dtype) { return softmax_op("log_softmax", x, dtype, true); }
Tensor log_softmax(const Tensor& x) {
  check_defined(x, "log_softmax", "x");
  return log_softmax(x, x.dtype());
}

}  // namespace ft
