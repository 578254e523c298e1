// The file of tuned cuBLASLt choices (lib/gemm_tuning.h): what one instance records another
// finds; a file written for another device or cuBLASLt version is started over; a line that is
// not a key and an index is an error naming the line; records are written whole (no temporary
// file left behind) and refuse keys a line could not hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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
  // Written whole through a temporary that was renamed: nothing but the file and the writers'
  // lock file is left.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "tuning.txt" || name == "tuning.txt.lock") << name;
  }
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

TEST(GemmTuningFileTest, WritersKeepEachOthersRecords) {
  // Two processes sharing a file (here two instances that read it before either wrote): each
  // record merges what the other wrote meanwhile, and its own choices win for its own keys.
  TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  const std::string validator = "device=90:H100 cublasLt=130000";
  GemmTuningFile first(path, validator), second(path, validator);
  first.record("1,1", 3);
  second.record("2,2", 4);
  first.record("3,3", 5);
  GemmTuningFile reread(path, validator);
  EXPECT_EQ(reread.size(), 3u);
  EXPECT_EQ(reread.find("1,1"), 3);
  EXPECT_EQ(reread.find("2,2"), 4);
  EXPECT_EQ(reread.find("3,3"), 5);
  EXPECT_EQ(first.find("2,2"), 4);  // taken from the file when first wrote again
}

TEST(GemmTuningFileTest, WhetherAFileParses) {
  TempDir dir("ft_tuning");
  const std::string path = dir.file("tuning.txt");
  EXPECT_TRUE(gemm_tuning_file_parses(path));  // none yet
  std::ofstream(path) << "fusedtrain gemm tuning v1 device=80:A100 cublasLt=1\n1,2 3\n";
  EXPECT_TRUE(gemm_tuning_file_parses(path));  // another device's, but well formed
  std::ofstream(path) << "fusedtrain gemm tuning v1 device=80:A100 cublasLt=1\n1,2 three\n";
  EXPECT_FALSE(gemm_tuning_file_parses(path));
  std::ofstream(path) << "something else\n";
  EXPECT_FALSE(gemm_tuning_file_parses(path));
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
