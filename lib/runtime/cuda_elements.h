// CUDA side of lib/runtime/elements.h (cuda_elements.cu): the same element kernels, on the
// current stream, each launch checked. Reached only under `if constexpr (kCudaBuild)`.
#pragma once
#include <cstdint>

#include "lib/dtype.h"

namespace ft::cuda {

void fill_elements(void* dst, DType dtype, int64_t n, double value);
void arange_elements(void* dst, DType dtype, int64_t n);
void convert_elements(void* dst, DType to, const void* src, DType from, int64_t n);
void sum_elements(void* out, const void* a, const void* b, DType dtype, int64_t n);
void accumulate_elements(void* dst, DType to, const void* src, DType from, int64_t n, bool overwrite, const float* scale);

}  // namespace ft::cuda
