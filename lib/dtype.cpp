#include "lib/dtype.h"

#include <charconv>
#include <string_view>

#include "lib/error.h"

namespace ft {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  FT_FAIL("unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

Device Device::parse(const std::string& text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return kCUDA;
  if (text.rfind("cuda:", 0) == 0) {
    const std::string_view index = std::string_view(text).substr(5);
    int value = -1;
    const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
    if (ec == std::errc() && end == index.data() + index.size() && value >= 0) return Device{DeviceType::CUDA, value};
  }
  FT_FAIL("unknown device '", text, "': expected cpu, cuda or cuda:N");
}

}  // namespace ft
