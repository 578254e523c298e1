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

}  // namespace ft::cuda
