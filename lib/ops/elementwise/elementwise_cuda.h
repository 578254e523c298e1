// The CUDA launchers of the elementwise primitives (elementwise.cu). Each enqueues on the
// compute stream and checks its launch.
// Compiled only in a CUDA build: callers reach these under `if constexpr (kCudaBuild)`
// (lib/kernel_mode.h), so a CPU-only build links without the .cu files.
#pragma once
#include <cstdint>

#include "lib/elementwise_math.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/tensor.h"

namespace ft::cuda {

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double p, double q);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const BroadcastPlan& plan);
void cast(const Tensor& x, const Tensor& out);
/// dst (f32/f64) = (overwrite ? 0 : dst) + scale · src, src converted as read (lib/ops/elementwise/elementwise.h).
void accumulate(const Tensor& src, const Tensor& dst, bool overwrite, const Tensor& scale);
void fill(const Tensor& out, double value);
void arange(const Tensor& out);

}  // namespace ft::cuda
