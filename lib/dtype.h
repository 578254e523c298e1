// Element types and devices, and the host-side bfloat16 storage type.
#pragma once
#include <compare>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>

namespace ft {

enum class DType : uint8_t { F32, F64, BF16, I32, I64, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
inline bool is_floating(DType dtype) { return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16; }

/// bfloat16 as stored: the top 16 bits of an IEEE float. Conversion rounds to nearest even.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float value) : bits(from_float(value)) {}
  explicit operator float() const { return to_float(bits); }

  static uint16_t from_float(float value) {
    uint32_t u;
    std::memcpy(&u, &value, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  /// Rounds a double once to the nearest bf16 (not twice through f32): the f32 step rounds to
  /// odd, which keeps the sticky information the final rounding needs.
  static bf16 from_double(double value) {
    float f = static_cast<float>(value);
    if (static_cast<double>(f) != value && f == f && f - f == 0.0f) {
      if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u |= 1u;
      std::memcpy(&f, &u, 4);
    }
    bf16 out;
    out.bits = from_float(f);
    return out;
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  auto operator<=>(const Device&) const = default;  // ordered: a map key
  std::string str() const;
  /// Parses "cpu", "cuda" or "cuda:N".
  static Device parse(const std::string& text);
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
inline constexpr Device kCUDA{DeviceType::CUDA, 0};

}  // namespace ft
