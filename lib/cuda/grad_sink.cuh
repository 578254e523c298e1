// GradSink: where a fused backward kernel stores a parameter's gradient values. Either the op's
// own dtype, overwritten (a fresh gradient tensor), or an f32 GradBuffer view, written or added
// to (autograd's grad_output says which), so a kernel that sums a bias or a norm gain in f32
// puts its sums straight into the persistent gradient instead of a bf16 tensor that autograd
// would then add in a kernel of its own.
#pragma once
#include <type_traits>

#include "lib/cuda/math.cuh"
#include "lib/dtype.h"
#include "lib/error.h"

namespace ft::cuda {

template <class T>
struct GradSink {
  T* out = nullptr;      // overwritten, in the op's dtype
  float* f32 = nullptr;  // or: an f32 gradient view
  bool add = false;      // f32: += instead of =
  GradSink() = default;
  GradSink(T* values) : out(values) {}  // NOLINT: a plain pointer is overwritten
  __host__ __device__ bool any() const { return out != nullptr || f32 != nullptr; }
  const void* data() const { return f32 ? static_cast<const void*>(f32) : static_cast<const void*>(out); }
  __device__ __forceinline__ void store(int64_t i, float v) const {
    if (f32) f32[i] = add ? f32[i] + v : v;
    else out[i] = from_acc<T>(v);
  }
};

/// The sink of a gradient output (autograd's GradOutput; a template so the device helpers stay
/// below the Tensor): f32 when the tensor is f32 and either is added to or T is not f32; else the
/// tensor itself, which must then be of T (overwritten).
template <class T, class Output>
GradSink<T> grad_sink(const Output& g) {
  GradSink<T> sink;
  if (!g.defined()) return sink;
  if (g.tensor.dtype() == DType::F32 && (g.accumulate || !std::is_same_v<T, float>)) {
    sink.f32 = g.tensor.template data<float>();
    sink.add = g.accumulate;
    return sink;
  }
  FT_CHECK(!g.accumulate, "gradient sink: only f32 views can be added to, got ", dtype_name(g.tensor.dtype()));
  sink.out = g.tensor.template data<T>();
  return sink;
}

}  // namespace ft::cuda
