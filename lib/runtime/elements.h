// Element kernels below the Tensor: the fills, conversions and sums the core needs for itself
// (Tensor::fill_, arange, copy_ across dtypes, autograd's gradient sums). They take spans of
// raw elements, so tensor.cpp and autograd.cpp call no op; the cast op and autograd's
// accumulate_into build on them. CPU loops in elements.cpp, CUDA kernels in cuda_elements.cu,
// both on the compute stream (or a StreamScope's) like every launcher.
#pragma once
#include <cstdint>

#include "lib/dtype.h"

namespace ft::runtime {

/// n elements of `dtype` at dst on `device`, each set to `value`.
void fill_elements(void* dst, DType dtype, Device device, int64_t n, double value);
/// dst[i] = i for n elements.
void arange_elements(void* dst, DType dtype, Device device, int64_t n);
/// n elements converted from `from` at src to `to` at dst, both on `device`.
void convert_elements(void* dst, DType to, const void* src, DType from, Device device, int64_t n);
/// out = a + b for n elements of one floating dtype on `device` (out may alias a or b).
void sum_elements(void* out, const void* a, const void* b, DType dtype, Device device, int64_t n);
/// dst (f32 or f64) = (overwrite ? 0 : dst) + scale · src, the floating src converted as read;
/// scale is one f32 on `device`, or null for 1. Gradient accumulation into flat-buffer views.
void accumulate_elements(void* dst, DType to, const void* src, DType from, Device device, int64_t n, bool overwrite,
                         const float* scale);

}  // namespace ft::runtime
