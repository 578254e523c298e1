// The file of tuned cuBLASLt choices (lib/gemm_tuning.h): what one instance records another
// finds; a file written for another device or cuBLASLt version is started over; a line that is
// not a key and an index is an error naming the line; records are written whole (no temporary
// file left behind) and refuse keys a line could not hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "lib/gemm_tuning.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"

namespace ft {
namespace {

using test::TempDir;

TEST(GemmTuningFileTest, WhatOneRecordsAnotherFinds) {
  TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  {
    GemmTuningFile file(path, "device=90:H100 cublasLt=130000");
    EXPECT_EQ(file.size(), 0u);
    EXPECT_FALSE(file.find("1,2,3").has_value());
    file.record("1,2,3", 5);
    file.record("4,5,6", 0);
    file.record("1,2,3", 2);  // a later record replaces the earlier
  }
  // Written whole through a temporary that was renamed: nothing but the file is left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  GemmTuningFile again(path, "device=90:H100 cublasLt=130000");
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again.find("1,2,3"), 2);
  EXPECT_EQ(again.find("4,5,6"), 0);
  EXPECT_FALSE(again.find("7,8,9").has_value());
}

TEST(GemmTuningFileTest, AnotherValidatorStartsOver) {
  TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  GemmTuningFile(path, "device=90:H100 cublasLt=130000").record("1,2,3", 5);
  GemmTuningFile other(path, "device=90:H200 cublasLt=130000");
  EXPECT_EQ(other.size(), 0u);
  other.record("4,5,6", 1);
  EXPECT_EQ(GemmTuningFile(path, "device=90:H200 cublasLt=130000").size(), 1u);
  EXPECT_EQ(GemmTuningFile(path, "device=90:H100 cublasLt=130000").size(), 0u);
}

TEST(GemmTuningFileTest, BadLinesAndRecordsAreErrors) {
  TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  const std::string validator = "device=90:H100 cublasLt=130000";
  for (const char* line : {"1,2,3", "1,2,3 x", "1,2,3 -1", "1,2,3 4 5"}) {
    SCOPED_TRACE(line);
    std::ofstream(path) << "fusedtrain gemm tuning v1 " << validator << "\n4,5,6 1\n" << line << "\n";
    EXPECT_FT_ERROR(GemmTuningFile(path, validator), "line 3");
  }
  std::ofstream(path) << "fusedtrain gemm tuning v1 " << validator << "\n";
  GemmTuningFile file(path, validator);
  EXPECT_FT_ERROR(file.record("1 2", 3), "bad record");
  EXPECT_FT_ERROR(file.record("1,2", -1), "bad record");
  EXPECT_FT_ERROR(GemmTuningFile("", validator), "empty path");
}

}  // namespace
}  // namespace ft
