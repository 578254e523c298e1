// safetensors: round trips of every dtype with metadata, the byte layout the format defines
// (checked by decoding the file in the test), atomic replacement, and corrupt files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "lib/error.h"
#include "tests/train/temp_dir.h"
#include "train/io/safetensors.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string file(const std::string& name) const { return temp_.file(name); }
  test::TempDir temp_{"ft_safetensors"};
  const fs::path& dir_ = temp_.path();
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  for (char c : header) b.push_back(static_cast<uint8_t>(c));
  b.resize(b.size() + data_bytes, 7);
  return b;
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  Generator gen(31);
  std::map<std::string, Tensor> tensors{
      {"w.f32", Tensor::randn({3, 5}, gen, DType::F32)},
      {"w.f64", Tensor::randn({7}, gen, DType::F64)},
      {"w.bf16", Tensor::randn({2, 3, 4}, gen, DType::BF16)},
      {"ids.i32", Tensor::from_vector({-3, 0, 2147483647}, {3}, DType::I32)},
      {"ids.i64", Tensor::from_vector({-5, 1, 9007199254740991.0}, {3}, DType::I64)},
      {"mask.u8", Tensor::from_vector({0, 1, 255}, {3}, DType::U8)},
      {"scalar", Tensor::from_vector({2.5}, {}, DType::F32)},
      {"empty", Tensor::empty({0, 4}, DType::F32)},
  };
  const std::map<std::string, std::string> meta{{"step", "12"}, {"note", "quote \" and \\ and\nnewline"}};
  save_safetensors(file("a.safetensors"), tensors, meta);
  const SafetensorsFile back = load_safetensors(file("a.safetensors"));
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& r = back.tensors.at(name);
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.to_vector(), t.to_vector());
  }
}

TEST_F(SafetensorsTest, LayoutFollowsTheFormat) {
  const Tensor a = Tensor::from_vector({1.5, -2}, {2}, DType::F32);
  save_safetensors(file("b.safetensors"), {{"a", a}});
  const std::vector<uint8_t> bytes = read_bytes(file("b.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  EXPECT_EQ(n % 8, 0u) << "the header is padded to 8 bytes";
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_NE(header.find("\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), std::string::npos) << header;
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  float values[2];
  std::memcpy(values, bytes.data() + 8 + n, 8);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);
}

TEST_F(SafetensorsTest, ReplacesAtomicallyAndLeavesNoTemporaryFile) {
  save_safetensors(file("c.safetensors"), {{"x", Tensor::full({4}, 1.0)}});
  save_safetensors(file("c.safetensors"), {{"x", Tensor::full({4}, 2.0)}});
  EXPECT_EQ(load_safetensors(file("c.safetensors")).tensors.at("x").to_vector(), std::vector<double>(4, 2.0));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
  // A write that cannot happen leaves the previous file as it was.
  EXPECT_THROW(save_safetensors(file("missing_dir/c.safetensors"), {{"x", Tensor::full({4}, 3.0)}}), Error);
  EXPECT_THROW(save_safetensors(file("c.safetensors"), {{"__metadata__", Tensor::full({1}, 3.0)}}), Error);
  EXPECT_EQ(load_safetensors(file("c.safetensors")).tensors.at("x").to_vector(), std::vector<double>(4, 2.0));
}

TEST_F(SafetensorsTest, RejectsCorruptFiles) {
  save_safetensors(file("ok.safetensors"), {{"a", Tensor::full({16}, 1.0)}, {"b", Tensor::full({4}, 2.0)}});
  const std::vector<uint8_t> ok = read_bytes(file("ok.safetensors"));
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Case> cases;
  cases.push_back({"short", {1, 2, 3}});
  cases.push_back({"truncated data", std::vector<uint8_t>(ok.begin(), ok.end() - 5)});
  cases.push_back({"truncated header", std::vector<uint8_t>(ok.begin(), ok.begin() + 20)});
  cases.push_back({"not json", with_header("{\"a\":{\"dtype\":\"F32\",", 4)});
  cases.push_back({"unknown dtype", with_header("{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8)});
  cases.push_back({"size mismatch", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8)});
  cases.push_back({"past the end", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8)});
  cases.push_back({"overlap", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                          12)});
  cases.push_back({"missing field", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8)});
  cases.push_back({"negative dim", with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8)});
  // 2^39 · 2^39 · 4 bytes wraps to 0 in 64 bits, the size of the empty range: the loader then
  // asked for a 2^78-element tensor (tests/fuzz/safetensors/regress-shape-bytes-wrap-past-2-64).
  cases.push_back({"shape past 2^64 bytes",
                   with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[549755813888,549755813888],"
                               "\"data_offsets\":[0,0]}}",
                               0)});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_bytes(file("bad.safetensors"), c.bytes);
    try {
      load_safetensors(file("bad.safetensors"));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(load_safetensors(file("nope.safetensors")), Error);
}

}  // namespace
}  // namespace ft
