// Model FLOPs utilization: the FLOPs a model needs per item (token, sample) times items per second,
// over the device's dense peak for the dtype the model computes in. The peaks come from NVIDIA's
// datasheets (dense, without 2:4 sparsity) and are looked up by the device's name, so that an
// unknown device reports no MFU instead of one computed against the wrong peak.
#pragma once
#include <optional>
#include <string>

#include "lib/dtype.h"

namespace ft {

/// Dense peak FLOP/s of the GPU called `device_name` (as cudaGetDeviceProperties names it, e.g.
/// "NVIDIA H100 80GB HBM3") for math in `dtype`: BF16 is the bf16/fp16 tensor-core peak, F32
/// the plain fp32 peak (the library's f32 products do not use TF32). nullopt for a device not in
/// the table and for other dtypes.
std::optional<double> peak_flops(const std::string& device_name, DType dtype);

/// The dense TF32 tensor-core peak of the same table, for code that runs f32 products as TF32.
std::optional<double> peak_tf32_flops(const std::string& device_name);

/// The peak of the GPU this process trains on (device_name()), or nullopt on the CPU and for an
/// unknown GPU.
std::optional<double> device_peak_flops(Device device, DType dtype);

/// flops_per_item · items_per_s / peak, or nullopt without a peak.
std::optional<double> mfu(double flops_per_item, double items_per_s, std::optional<double> peak);

}  // namespace ft
