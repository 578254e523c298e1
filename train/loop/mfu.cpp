#include "train/loop/mfu.h"

#include <cctype>

#include "lib/runtime.h"

namespace ft {

namespace {

struct DevicePeak {
  const char* name;  // a word in the device's name, matched whole (so "A100" is not "A1000")
  double bf16, tf32, fp32;
};

// Dense TFLOP/s from NVIDIA's datasheets. The Hopper sheets give tensor-core figures with 2:4
// sparsity and say the dense ones are half of them (H100 SXM: BF16 1,979 and TF32 989 with
// sparsity); the A100 and L40S sheets give the dense figures themselves. Ordered so that a
// variant comes before the family name it contains.
constexpr DevicePeak kPeaks[] = {
    {"H100 NVL", 1671.0 / 2, 835.0 / 2, 60.0},
    {"H100 PCIe", 1513.0 / 2, 756.0 / 2, 51.0},
    {"H100 80GB HBM3", 1979.0 / 2, 989.0 / 2, 67.0},  // the SXM5 board, as the driver names it
    {"H100 SXM", 1979.0 / 2, 989.0 / 2, 67.0},
    {"H100 SXM5", 1979.0 / 2, 989.0 / 2, 67.0},
    {"H200 NVL", 1671.0 / 2, 835.0 / 2, 60.0},
    {"H200", 1979.0 / 2, 989.0 / 2, 67.0},  // the SXM board
    {"A100", 312.0, 156.0, 19.5},           // every A100: SXM4 and PCIe, 40 and 80 GB
    {"L40S", 362.05, 183.0, 91.6},
};

// Whether `word` occurs in `name` with no letter or digit right before or after it.
bool contains_word(const std::string& name, const std::string& word) {
  for (size_t at = name.find(word); at != std::string::npos; at = name.find(word, at + 1)) {
    const bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const size_t end = at + word.size();
    const bool ends = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
    if (starts && ends) return true;
  }
  return false;
}

const DevicePeak* find_peak(const std::string& device_name) {
  for (const DevicePeak& p : kPeaks)
    if (contains_word(device_name, p.name)) return &p;
  return nullptr;
}

}  // namespace

std::optional<double> peak_flops(const std::string& device_name, DType dtype) {
  const DevicePeak* p = find_peak(device_name);
  if (!p) return std::nullopt;
  if (dtype == DType::BF16) return p->bf16 * 1e12;
  if (dtype == DType::F32) return p->fp32 * 1e12;
  return std::nullopt;
}

std::optional<double> peak_tf32_flops(const std::string& device_name) {
  const DevicePeak* p = find_peak(device_name);
  if (!p) return std::nullopt;
  return p->tf32 * 1e12;
}

std::optional<double> device_peak_flops(Device device, DType dtype) {
  if (!device.is_cuda()) return std::nullopt;
  return peak_flops(device_name(), dtype);
}

std::optional<double> mfu(double flops_per_item, double items_per_s, std::optional<double> peak) {
  if (!peak || *peak <= 0) return std::nullopt;
  return flops_per_item * items_per_s / *peak;
}

}  // namespace ft
