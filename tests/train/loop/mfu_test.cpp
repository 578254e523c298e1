// MFU's peaks by device name (NVIDIA datasheets, dense) and the start-up summary.
#include <gtest/gtest.h>

#include "train/loop/mfu.h"
#include "train/loop/startup.h"

namespace ft {
namespace {

TEST(Mfu, KnownDevicesGiveTheirDatasheetDensePeak) {
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H100 80GB HBM3", DType::BF16), 989.5e12);  // SXM5
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H100 PCIe", DType::BF16), 756.5e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H100 NVL", DType::BF16), 835.5e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H200", DType::BF16), 989.5e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H200 NVL", DType::BF16), 835.5e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA A100-SXM4-80GB", DType::BF16), 312e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA A100 80GB PCIe", DType::BF16), 312e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA L40S", DType::BF16), 362.05e12);
  EXPECT_DOUBLE_EQ(*peak_flops("NVIDIA H100 80GB HBM3", DType::F32), 67e12);
  EXPECT_DOUBLE_EQ(*peak_tf32_flops("NVIDIA H100 80GB HBM3"), 494.5e12);
}

TEST(Mfu, UnknownDevicesAndTheCpuGiveNoPeak) {
  EXPECT_FALSE(peak_flops("NVIDIA GeForce RTX 4090", DType::BF16));
  EXPECT_FALSE(peak_flops("NVIDIA RTX A1000", DType::BF16));  // not an A100
  EXPECT_FALSE(peak_flops("NVIDIA GH200 480GB", DType::BF16));  // not in the table, not an H200
  EXPECT_FALSE(peak_flops("NVIDIA L40", DType::BF16));  // the L40 is not an L40S
  EXPECT_FALSE(peak_flops("", DType::BF16));
  EXPECT_FALSE(peak_flops("NVIDIA H100 80GB HBM3", DType::F64));
  EXPECT_FALSE(device_peak_flops(kCPU, DType::F32));
  EXPECT_FALSE(mfu(1e9, 1e5, std::nullopt));
  EXPECT_DOUBLE_EQ(*mfu(6e9, 1e5, 1e15), 0.6);
}

TEST(Startup, SummaryListsTheMarkedPhases) {
  mark_startup("test phase");
  const std::string summary = startup_summary();
  EXPECT_EQ(summary.rfind("start-up: ", 0), 0u) << summary;
  EXPECT_NE(summary.find("test phase "), std::string::npos) << summary;
  EXPECT_GT(seconds_since_start(), 0.0);
}

}  // namespace
}  // namespace ft
