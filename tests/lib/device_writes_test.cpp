// runtime::write_on_device and CapturedGraph's per-replay writes: copies of odd sizes and
// alignments (16-byte words and a byte tail) and f32 values land exactly; copies into pinned host
// memory too; a captured graph re-pointed for each replay reads each replay's inputs, and replays
// enqueued earlier keep theirs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "tests/lib/test_util.h"

namespace ft {
namespace {

using namespace ft::test;

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU);
  const auto* p = static_cast<const uint8_t*>(host.data_ptr());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

TEST(DeviceWritesTest, CopiesAndValuesLandExactly) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen(3);
  // 1 byte, a 16-byte-word copy with a tail, and one whose source is not 16-byte aligned.
  const Tensor a = random_ids({1}, 250, DType::U8, kCUDA, gen), b = random_ids({70001}, 250, DType::U8, kCUDA, gen);
  const Tensor c = random_ids({4099}, 250, DType::U8, kCUDA, gen);
  const Tensor a2 = Tensor::zeros({1}, DType::U8, kCUDA), b2 = Tensor::zeros({70001}, DType::U8, kCUDA);
  const Tensor c2 = Tensor::zeros({4096}, DType::U8, kCUDA);
  const Tensor v = Tensor::zeros({2}, DType::F32, kCUDA);
  DeviceWrites writes;
  writes.copies = {{a2.data_ptr(), a.data_ptr(), 1},
                   {b2.data_ptr(), b.data_ptr(), 70001},
                   {c2.data_ptr(), static_cast<const uint8_t*>(c.data_ptr()) + 3, 4096}};
  writes.scalars = {{v.data<float>(), 1.25f}, {v.data<float>() + 1, -3.5e-4f}};
  runtime::write_on_device(writes);
  EXPECT_EQ(bytes_of(a2), bytes_of(a));
  EXPECT_EQ(bytes_of(b2), bytes_of(b));
  const std::vector<uint8_t> c_bytes = bytes_of(c);
  EXPECT_EQ(bytes_of(c2), std::vector<uint8_t>(c_bytes.begin() + 3, c_bytes.end()));
  EXPECT_EQ(v.to_vector(), (std::vector<double>{1.25, static_cast<double>(-3.5e-4f)}));
}

TEST(DeviceWritesTest, CopiesIntoPinnedHostMemory) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen(4);
  const Tensor x = Tensor::randn({5}, gen, DType::F32, kCUDA);
  void* pinned = runtime::allocate_pinned(64);
  std::memset(pinned, 0xff, 64);
  runtime::write_on_device(DeviceWrites{.copies = {{pinned, x.data_ptr(), x.nbytes()}}, .scalars = {}});
  StreamEvent done;
  done.record(StreamEvent::Stream::Compute);
  done.synchronize();
  std::vector<float> got(5);
  std::memcpy(got.data(), pinned, sizeof(float) * 5);
  runtime::release_pinned(pinned);
  const std::vector<double> want = x.to_vector();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(static_cast<double>(got[i]), want[i]) << i;
}

TEST(DeviceWritesTest, ACapturedGraphReadsEachReplaysWrites) {
  FT_SKIP_UNLESS_AVAILABLE(kCUDA);
  Generator gen(5);
  const Tensor fixed = Tensor::empty({1000}, DType::F32, kCUDA), scale = Tensor::empty({1}, DType::F32, kCUDA);
  const Tensor out = Tensor::empty({1000}, DType::F32, kCUDA);
  auto writes_for = [&](const Tensor& src, float s) {
    return DeviceWrites{.copies = {{fixed.data_ptr(), src.data_ptr(), src.nbytes()}}, .scalars = {{scale.data<float>(), s}}};
  };
  std::vector<Tensor> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(Tensor::randn({1000}, gen, DType::F32, kCUDA));
  const DeviceWrites first = writes_for(inputs[0], 2.0f);
  CapturedGraph graph([&] { out.copy_(fixed * scale); }, &first);
  // Several replays enqueued before any is read: each keeps its own inputs.
  std::vector<Tensor> results;
  for (int i = 0; i < 4; ++i) {
    graph.replay(writes_for(inputs[i], static_cast<float>(i) + 0.5f));
    results.push_back(Tensor::empty({1000}, DType::F32, kCUDA));
    results.back().copy_(out);
  }
  for (int i = 0; i < 4; ++i) {
    const std::vector<double> want = (inputs[i] * (static_cast<double>(i) + 0.5)).to_vector();
    EXPECT_EQ(results[i].to_vector(), want) << "replay " << i;
  }
  EXPECT_FT_ERROR(CapturedGraph([&] { out.copy_(fixed); }).replay(first), "per-replay");
}

}  // namespace
}  // namespace ft
