#include "lib/cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "lib/cuda/runtime.h"
#include "lib/error.h"

namespace ft::cuda {

namespace {

constexpr int64_t kElementBytes = 2;  // bf16

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found));
    FT_CHECK(found == cudaDriverEntryPointSuccess && entry != nullptr,
             "TMA: the driver has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

}  // namespace

bool tensor_map_possible(const TensorMapRequest& r) {
  if (reinterpret_cast<uintptr_t>(r.base) % 16 != 0) return false;
  for (int64_t stride : r.strides)
    if ((stride * kElementBytes) % 16 != 0 || stride <= 0 || stride * kElementBytes >= (int64_t{1} << 40)) return false;
  for (int64_t size : r.sizes)
    if (size <= 0 || size > (int64_t{1} << 32)) return false;
  return true;
}

CUtensorMap encode_tensor_map(const TensorMapRequest& r) {
  FT_CHECK(tensor_map_possible(r), "TMA: the tensor's base or strides are not 16-byte aligned");
  FT_CHECK(r.box[0] * kElementBytes == 128, "TMA: a 128-byte swizzled box is 64 bf16 wide, got ", r.box[0]);
  cuuint64_t sizes[4], strides[3];
  cuuint32_t box[4], element_strides[4] = {1, 1, 1, 1};
  for (int d = 0; d < 4; ++d) {
    FT_CHECK(r.box[d] >= 1 && r.box[d] <= 256, "TMA: box dim ", d, " must be in [1, 256], got ", r.box[d]);
    sizes[d] = static_cast<cuuint64_t>(r.sizes[d]);
    box[d] = static_cast<cuuint32_t>(r.box[d]);
  }
  for (int d = 0; d < 3; ++d) strides[d] = static_cast<cuuint64_t>(r.strides[d] * kElementBytes);
  CUtensorMap map{};
  const CUresult status =
      encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(r.base), sizes, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FT_CHECK(status == CUDA_SUCCESS, "TMA: cuTensorMapEncodeTiled refused the map (CUresult ", static_cast<int>(status),
           "): sizes {", r.sizes[0], ", ", r.sizes[1], ", ", r.sizes[2], ", ", r.sizes[3], "}, box {", r.box[0], ", ",
           r.box[1], ", ", r.box[2], ", ", r.box[3], "}");
  return map;
}

}  // namespace ft::cuda
