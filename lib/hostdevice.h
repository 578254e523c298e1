// Lets one definition of per-element math serve the CPU kernels and the CUDA kernels alike,
// so the two paths never carry copies of the same formula.
#pragma once
#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FT_HOST_DEVICE inline
#endif
