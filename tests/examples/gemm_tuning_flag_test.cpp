// The example binaries' --gemm-tuning (examples/common/cli.h): off turns autotuning off; a path
// turns it on with that file, its folder made; auto takes $FT_GEMM_TUNING_FILE, else the cache
// folder (default_gemm_tuning_path), and without a usable cache stays off rather than timing
// choices that no later process would share; a corrupt cache is set aside; a named file in a
// folder that cannot be made is an error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "examples/common/cli.h"
#include "lib/gemm_tuning.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/runtime.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"

namespace ft {
namespace {

using test::TempDir;

/// Sets (or, with nullopt, unsets) an environment variable for a scope.
class EnvScope {
 public:
  EnvScope(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~EnvScope() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Leaves the process's tuning settings as it found them.
class TuningSettingsScope {
 public:
  ~TuningSettingsScope() {
    set_gemm_autotune(autotune_);
    set_gemm_tuning_file(file_);
  }

 private:
  bool autotune_ = gemm_autotune();
  std::string file_ = gemm_tuning_file();
};

cli::Args parsed(const std::string& value) {
  cli::Args args("ft-test", "test");
  cli::add_gemm_tuning_flag(args);
  std::string flag = "--gemm-tuning=" + value;
  char program[] = "ft-test";
  char* argv[] = {program, flag.data()};
  EXPECT_TRUE(args.parse(2, argv));
  return args;
}

TEST(GemmTuningFlagTest, AFileForEachGpuModel) {
  EXPECT_EQ(gemm_tuning_file_name("NVIDIA H100 80GB HBM3"), "gemm-tuning-NVIDIA_H100_80GB_HBM3.txt");
  EXPECT_EQ(gemm_tuning_file_name("a/b c.d-e"), "gemm-tuning-a_b_c.d-e.txt");
  EXPECT_EQ(gemm_tuning_file_name(""), "gemm-tuning.txt");
}

TEST(GemmTuningFlagTest, DefaultPathFollowsTheCacheVariables) {
  const std::string name = gemm_tuning_file_name(device_name());  // this machine's GPU, or none
  {
    EnvScope xdg("XDG_CACHE_HOME", "/somewhere/cache");
    EXPECT_EQ(default_gemm_tuning_path(), "/somewhere/cache/fusedtrain/" + name);
  }
  EnvScope xdg("XDG_CACHE_HOME", std::nullopt);
  {
    EnvScope home("HOME", "/home/someone");
    EXPECT_EQ(default_gemm_tuning_path(), "/home/someone/.cache/fusedtrain/" + name);
  }
  EnvScope home("HOME", std::nullopt);
  EXPECT_EQ(default_gemm_tuning_path(), "");
}

TEST(GemmTuningFlagTest, OffPathAndAuto) {
  TuningSettingsScope restore;
  TempDir dir("ft_tuning_flag");
  EnvScope named("FT_GEMM_TUNING_FILE", std::nullopt);

  set_gemm_autotune(true);
  cli::apply_gemm_tuning_flag(parsed("off"), "ft-test");
  EXPECT_FALSE(gemm_autotune());
  EXPECT_EQ(gemm_tuning_file(), "");

  const std::string path = dir.file("deeper/still/choices.txt");
  cli::apply_gemm_tuning_flag(parsed(path), "ft-test");
  EXPECT_TRUE(gemm_autotune());
  EXPECT_EQ(gemm_tuning_file(), path);
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("deeper/still")));

  {
    EnvScope xdg("XDG_CACHE_HOME", dir.file("cache"));
    cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test");
    EXPECT_TRUE(gemm_autotune());
    EXPECT_EQ(gemm_tuning_file(), dir.file("cache") + "/fusedtrain/" + gemm_tuning_file_name(device_name()));
    EXPECT_TRUE(std::filesystem::is_directory(dir.file("cache/fusedtrain")));

    EnvScope named_now("FT_GEMM_TUNING_FILE", dir.file("named.txt"));
    cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test");
    EXPECT_EQ(gemm_tuning_file(), dir.file("named.txt"));
  }

  EnvScope xdg("XDG_CACHE_HOME", std::nullopt);
  EnvScope home("HOME", std::nullopt);
  cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test");
  EXPECT_FALSE(gemm_autotune());
  EXPECT_EQ(gemm_tuning_file(), "");
}

TEST(GemmTuningFlagTest, ACorruptCacheIsSetAsideAndAnEmptyValueRefused) {
  TuningSettingsScope restore;
  TempDir dir("ft_tuning_flag");
  EnvScope named("FT_GEMM_TUNING_FILE", std::nullopt);
  EnvScope xdg("XDG_CACHE_HOME", dir.file("cache"));
  const std::string cache = dir.file("cache") + "/fusedtrain/" + gemm_tuning_file_name(device_name());
  std::filesystem::create_directories(dir.file("cache/fusedtrain"));
  std::ofstream(cache) << "half a file";
  cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test");
  EXPECT_TRUE(gemm_autotune());
  EXPECT_EQ(gemm_tuning_file(), cache);
  EXPECT_FALSE(std::filesystem::exists(cache));
  EXPECT_TRUE(std::filesystem::exists(cache + ".bad"));
  EXPECT_FT_ERROR(cli::apply_gemm_tuning_flag(parsed(""), "ft-test"), "--gemm-tuning");
}

TEST(GemmTuningFlagTest, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  TuningSettingsScope restore;
  TempDir dir("ft_tuning_flag");
  const std::string blocker = dir.file("a_file");
  std::ofstream(blocker) << "not a folder";
  EXPECT_FT_ERROR(cli::apply_gemm_tuning_flag(parsed(blocker + "/choices.txt"), "ft-test"), "a_file");
  // auto with such a cache folder notes it and stays off instead.
  EnvScope named("FT_GEMM_TUNING_FILE", std::nullopt);
  EnvScope xdg("XDG_CACHE_HOME", blocker);
  set_gemm_autotune(true);
  cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test");
  EXPECT_FALSE(gemm_autotune());
  // A file the environment names is the user's choice, as the flag's is: an error, not a note.
  EnvScope named_bad("FT_GEMM_TUNING_FILE", blocker + "/choices.txt");
  EXPECT_FT_ERROR(cli::apply_gemm_tuning_flag(parsed("auto"), "ft-test"), "a_file");
}

}  // namespace
}  // namespace ft
