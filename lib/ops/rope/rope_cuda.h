// The CUDA side of rope: its fused path (rope_fused.cpp) and the rotation kernel's launcher
// (rope.cu). Compiled only in a CUDA build; callers reach it under `if constexpr (kCudaBuild)`.
#pragma once
#include "lib/ops/rope/rope.h"
#include "lib/tensor.h"

namespace ft::cuda {

/// rope's fused path: f32/bf16 x [B, T, NH, HS] on CUDA, not empty.
Tensor rope_fused(const Tensor& x, const RopeConfig& config);

/// y = x with each pair (i, i + HS/2) of every row at token t turned by the angle whose cos and
/// sin are cos[t, i], sin[t, i] (f32 [T, HS/2]), or by its opposite when `inverse` (the
/// backward). x and y [B, T, NH, HS], one dtype (f32 or bf16); y may not alias x.
void rope_rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y);

}  // namespace ft::cuda
