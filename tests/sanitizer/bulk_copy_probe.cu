// Does compute-sanitizer's initcheck see writes made by Hopper's bulk copy engine? One buffer is
// written by ordinary stores, one by a bulk copy out of shared memory (the project's
// mma::bulk_store, which the attention backward uses for its dQ sums) and one by a cuBLAS bf16
// GEMM (on Hopper an nvjet kernel, which stores its tile through TMA); a kernel then reads an
// element of each, and each is copied to the host. Run plain, it checks that every buffer holds what was
// written. Run under `compute-sanitizer --tool initcheck`, reports on the bulk- or
// cuBLAS-written buffers alone mean the tool does not track those writes, so its reports on
// memory written that way are the tool's, not the program's. scripts/device/run.sh sanitize runs it
// first and prints what it found.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdio>
#include <vector>

#include "lib/cuda/mma.cuh"

namespace {

constexpr int kFloats = 256;

__global__ void store_plain(float* out) { out[threadIdx.x] = static_cast<float>(threadIdx.x); }

__global__ void store_bulk(float* out) {
  __shared__ __align__(128) float staged[kFloats];
  staged[threadIdx.x] = static_cast<float>(threadIdx.x);
  ft::cuda::mma::fence_shared_for_bulk();
  __syncthreads();
  if (threadIdx.x == 0) {
    ft::cuda::mma::bulk_store(out, staged, kFloats * sizeof(float));
    ft::cuda::mma::commit_bulk();
    ft::cuda::mma::wait_bulk();
  }
}

// One thread reads one element, so each buffer gets at most one report.
__global__ void read_after_plain(const float* in, float* out) { *out = in[kFloats - 1]; }
__global__ void read_after_bulk(const float* in, float* out) { *out = in[kFloats - 1]; }
__global__ void read_after_cublas(const __nv_bfloat16* in, float* out) { *out = __bfloat162float(in[0]); }

// C = A·B for 256 x 256 bf16 matrices of ones (every element of C is 256, exact in bf16).
bool gemm_of_ones(__nv_bfloat16* c) {
  constexpr int n = 256;
  std::vector<__nv_bfloat16> ones(n * n, __float2bfloat16(1.0f));
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  cudaMalloc(&a, n * n * sizeof(__nv_bfloat16));
  cudaMalloc(&b, n * n * sizeof(__nv_bfloat16));
  cudaMemcpy(a, ones.data(), n * n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cudaMemcpy(b, ones.data(), n * n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cublasHandle_t handle = nullptr;
  const float alpha = 1.0f, beta = 0.0f;
  const bool ok = cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS &&
                  cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                               &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  cudaDeviceSynchronize();
  if (handle) cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  return ok;
}

}  // namespace

int main() {
  float *plain = nullptr, *bulk = nullptr, *read = nullptr;
  __nv_bfloat16* product = nullptr;
  cudaMalloc(&plain, kFloats * sizeof(float));
  cudaMalloc(&bulk, kFloats * sizeof(float));
  cudaMalloc(&product, 256 * 256 * sizeof(__nv_bfloat16));
  cudaMalloc(&read, 3 * sizeof(float));
  store_plain<<<1, kFloats>>>(plain);
  store_bulk<<<1, kFloats>>>(bulk);
  const bool gemm_ok = gemm_of_ones(product);
  read_after_plain<<<1, 1>>>(plain, read);
  read_after_bulk<<<1, 1>>>(bulk, read + 1);
  read_after_cublas<<<1, 1>>>(product, read + 2);
  float host_read[3] = {}, host_plain[kFloats] = {}, host_bulk[kFloats] = {};
  std::vector<__nv_bfloat16> host_product(256 * 256);
  cudaMemcpy(host_read, read, sizeof host_read, cudaMemcpyDeviceToHost);
  cudaMemcpy(host_plain, plain, sizeof host_plain, cudaMemcpyDeviceToHost);
  cudaMemcpy(host_bulk, bulk, sizeof host_bulk, cudaMemcpyDeviceToHost);
  cudaMemcpy(host_product.data(), product, host_product.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  const cudaError_t status = cudaDeviceSynchronize();
  bool ok = gemm_ok && status == cudaSuccess && host_read[0] == kFloats - 1 && host_read[1] == kFloats - 1 &&
            host_read[2] == 256.0f;
  for (int i = 0; i < kFloats; ++i) ok = ok && host_plain[i] == static_cast<float>(i) && host_bulk[i] == static_cast<float>(i);
  for (const __nv_bfloat16& v : host_product) ok = ok && __bfloat162float(v) == 256.0f;
  std::printf("bulk copy probe: %s (read %.0f, %.0f and %.0f, expected %d, %d and 256; %s)\n",
              ok ? "values right" : "VALUES WRONG", host_read[0], host_read[1], host_read[2], kFloats - 1, kFloats - 1,
              cudaGetErrorString(status));
  return ok ? 0 : 1;
}
