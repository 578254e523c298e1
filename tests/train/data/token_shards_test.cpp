// The token loader on llm.c shards and text files the test writes: batches against the token
// streams the test drew, epochs and their shuffled file orders, resuming from a position, and
// every malformed input.
//
// B: batch size, T: sequence length.
#include <gtest/gtest.h>

#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include <unistd.h>

#include "lib/error.h"
#include "train/data/token_shards.h"

namespace ft {

// Readable positions in gtest's failure messages.
void PrintTo(const TokenPosition& p, std::ostream* out) {
  *out << "{epoch " << p.epoch << ", shard " << p.shard << ", offset " << p.offset << "}";
}

namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::vector<uint16_t> random_tokens(size_t n, int vocab_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> draw(0, vocab_size - 1);
  std::vector<uint16_t> tokens(n);
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(draw(rng));
  return tokens;
}

void put_i32(std::vector<uint8_t>& bytes, size_t at, int64_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(static_cast<uint32_t>(value) >> (8 * i));
}

// An llm.c shard, written byte by byte in little-endian so the test does not share the loader's
// decoding. `count` overrides the header's token count.
std::vector<uint8_t> shard_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                                 std::optional<int64_t> count = std::nullopt) {
  std::vector<uint8_t> bytes(256 * 4, 0);
  put_i32(bytes, 0, magic);
  put_i32(bytes, 4, version);
  put_i32(bytes, 8, count.value_or(static_cast<int64_t>(tokens.size())));
  for (uint16_t t : tokens) {
    bytes.push_back(static_cast<uint8_t>(t & 0xFF));
    bytes.push_back(static_cast<uint8_t>(t >> 8));
  }
  return bytes;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<int32_t> values(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

// The batch must be the B·T + 1 tokens of `stream` from `offset`: inputs the first B·T, targets
// the same shifted by one.
void expect_batch(const TokenBatch& batch, const std::vector<uint16_t>& stream, int64_t offset, int64_t B, int64_t T) {
  for (const Tensor* t : {&batch.inputs, &batch.targets}) {
    ASSERT_EQ(t->shape(), (Shape{B, T}));
    ASSERT_EQ(t->dtype(), DType::I32);
    ASSERT_FALSE(t->is_cuda());
  }
  ASSERT_LE(static_cast<size_t>(offset + B * T + 1), stream.size());
  const auto from = stream.begin() + offset;
  EXPECT_EQ(values(batch.inputs), std::vector<int32_t>(from, from + B * T)) << "offset " << offset;
  EXPECT_EQ(values(batch.targets), std::vector<int32_t>(from + 1, from + B * T + 1)) << "offset " << offset;
}

// Inputs then targets, to compare whole batches between loaders.
std::vector<int32_t> flat(const TokenBatch& batch) {
  std::vector<int32_t> v = values(batch.inputs);
  const std::vector<int32_t> targets = values(batch.targets);
  v.insert(v.end(), targets.begin(), targets.end());
  return v;
}

void expect_error(const std::function<void()>& run, const std::vector<std::string>& parts) {
  try {
    run();
    ADD_FAILURE() << "expected an ft::Error mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << "\nlacks: " << part;
  }
}

constexpr int kGpt2Vocab = 50257;

TEST(TokenLoader, ReadsShardsInSortedOrder) {
  TempDir dir("ft_tokens");
  const int64_t B = 2, T = 8;
  // Written in reverse so that the order comes from sorting, not from the directory.
  const std::vector<uint16_t> second = random_tokens(77, kGpt2Vocab, 2), first = random_tokens(100, kGpt2Vocab, 1);
  write_file(dir.file("train_001.bin"), shard_bytes(second));
  write_file(dir.file("train_000.bin"), shard_bytes(first));
  write_file(dir.file("val_000.bin"), shard_bytes(random_tokens(50, kGpt2Vocab, 3)));
  TokenLoader loader(dir.file("train_*.bin"), {.batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab});
  ASSERT_EQ(loader.files(), (std::vector<std::string>{dir.file("train_000.bin"), dir.file("train_001.bin")}));
  EXPECT_EQ(loader.batches_per_epoch(), (100 - 1) / (B * T) + (77 - 1) / (B * T));

  int64_t batches = 0;
  for (int64_t shard = 0; shard < 2; ++shard) {
    const std::vector<uint16_t>& stream = shard == 0 ? first : second;
    // Every batch start that leaves B·T + 1 tokens, stepping by B·T; the tail is skipped.
    for (int64_t offset = 0; offset + B * T + 1 <= static_cast<int64_t>(stream.size()); offset += B * T) {
      ASSERT_EQ(loader.position(), (TokenPosition{0, shard, offset}));
      EXPECT_EQ(loader.current_file(), loader.files()[static_cast<size_t>(shard)]);
      expect_batch(loader.next_batch(), stream, offset, B, T);
      ++batches;
    }
  }
  EXPECT_EQ(batches, loader.batches_per_epoch());
  EXPECT_EQ(loader.position(), (TokenPosition{1, 0, 0}));
}

// Data parallelism: rank r of W reads the r-th B·T tokens of every global batch, so the ranks'
// batches, row after row in rank order, are those of one loader with batch W·B, epoch after epoch.
TEST(TokenLoader, RanksTogetherReadTheSingleProcessBatches) {
  TempDir dir("ft_tokens");
  const int64_t B = 2, T = 8, W = 3;
  write_file(dir.file("t_000.bin"), shard_bytes(random_tokens(300, kGpt2Vocab, 4)));
  write_file(dir.file("t_001.bin"), shard_bytes(random_tokens(170, kGpt2Vocab, 5)));
  TokenLoader whole(dir.file("t_*.bin"), {.batch_size = W * B, .seq_len = T, .vocab_size = kGpt2Vocab});
  std::vector<TokenLoader> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back(dir.file("t_*.bin"), TokenLoader::Options{.batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab,
                                                                  .shard = BatchShard{r, static_cast<int>(W)}});
  EXPECT_EQ(ranks[0].batches_per_epoch(), whole.batches_per_epoch());
  for (int64_t b = 0; b < 2 * whole.batches_per_epoch(); ++b) {
    const TokenBatch expected = whole.next_batch();
    for (int r = 0; r < W; ++r) {
      const TokenBatch got = ranks[static_cast<size_t>(r)].next_batch();
      EXPECT_EQ(got.inputs.to_vector(), expected.inputs.narrow(0, r * B, B).to_vector()) << "batch " << b;
      EXPECT_EQ(got.targets.to_vector(), expected.targets.narrow(0, r * B, B).to_vector()) << "batch " << b;
    }
    EXPECT_EQ(ranks[W - 1].position(), whole.position());
  }
  EXPECT_FT_ERROR(TokenLoader(dir.file("t_*.bin"), TokenLoader::Options{.batch_size = B, .seq_len = T,
                                                                        .vocab_size = kGpt2Vocab, .shard = {3, 3}}),
                  "rank 3");
}

TEST(TokenLoader, WrapsToANewEpochInTheSameOrder) {
  TempDir dir("ft_tokens");
  const int64_t B = 3, T = 4;
  const std::vector<uint16_t> a = random_tokens(40, kGpt2Vocab, 10), b = random_tokens(13, kGpt2Vocab, 11);
  write_file(dir.file("a.bin"), shard_bytes(a));
  write_file(dir.file("b.bin"), shard_bytes(b));  // exactly B·T + 1 tokens: one batch
  TokenLoader loader(dir.file("*.bin"), {.batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab, .seed = 5});
  ASSERT_EQ(loader.batches_per_epoch(), 3 + 1);
  std::vector<std::vector<int32_t>> epoch0;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) epoch0.push_back(flat(loader.next_batch()));
  EXPECT_EQ(loader.position(), (TokenPosition{1, 0, 0}));
  for (int64_t epoch = 1; epoch <= 2; ++epoch) {
    for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) EXPECT_EQ(flat(loader.next_batch()), epoch0[i]) << i;
    EXPECT_EQ(loader.position(), (TokenPosition{epoch + 1, 0, 0}));
  }

  // One file wraps onto itself.
  TokenLoader single(dir.file("b.bin"), {.batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab});
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(single.position(), (TokenPosition{epoch, 0, 0}));
    expect_batch(single.next_batch(), b, 0, B, T);
  }
}

// The files one epoch visits, read off current_file() before each batch, with every batch
// checked against its file's tokens.
std::vector<std::string> epoch_files(TokenLoader& loader, const std::map<std::string, std::vector<uint16_t>>& streams,
                                     int64_t B, int64_t T) {
  std::vector<std::string> files;
  const int64_t epoch = loader.position().epoch;
  for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
    const TokenPosition at = loader.position();
    EXPECT_EQ(at.epoch, epoch);
    const std::string file = loader.current_file();
    if (files.empty() || files.back() != file) files.push_back(file);
    expect_batch(loader.next_batch(), streams.at(file), at.offset, B, T);
  }
  EXPECT_EQ(loader.position(), (TokenPosition{epoch + 1, 0, 0}));
  return files;
}

TEST(TokenLoader, ShufflesFilesPerEpochFromTheSeed) {
  TempDir dir("ft_tokens");
  const int64_t B = 1, T = 4;
  std::map<std::string, std::vector<uint16_t>> streams;
  for (int i = 0; i < 6; ++i) {
    const std::string path = dir.file("shard_" + std::to_string(i) + ".bin");
    streams[path] = random_tokens(static_cast<size_t>(20 + 7 * i), kGpt2Vocab, 100 + static_cast<uint64_t>(i));
    write_file(path, shard_bytes(streams[path]));
  }
  const std::string pattern = dir.file("shard_*.bin");
  auto options = [&](uint64_t seed, bool shuffle) {
    return TokenLoader::Options{
        .batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab, .seed = seed, .shuffle = shuffle};
  };
  TokenLoader a(pattern, options(7, true)), b(pattern, options(7, true)), c(pattern, options(8, true)),
      plain(pattern, options(7, false));
  const std::set<std::string> all(a.files().begin(), a.files().end());
  std::vector<std::vector<std::string>> orders_a, orders_c;
  for (int epoch = 0; epoch < 4; ++epoch) {
    orders_a.push_back(epoch_files(a, streams, B, T));
    EXPECT_EQ(epoch_files(b, streams, B, T), orders_a.back()) << "epoch " << epoch;
    orders_c.push_back(epoch_files(c, streams, B, T));
    EXPECT_EQ(epoch_files(plain, streams, B, T), a.files()) << "epoch " << epoch;
    // Each epoch visits every file once.
    EXPECT_EQ(orders_a.back().size(), all.size());
    EXPECT_EQ(std::set<std::string>(orders_a.back().begin(), orders_a.back().end()), all);
    EXPECT_EQ(std::set<std::string>(orders_c.back().begin(), orders_c.back().end()), all);
  }
  EXPECT_NE(orders_a, orders_c);
  // A new order each epoch, not one order drawn once.
  EXPECT_TRUE(orders_a[1] != orders_a[0] || orders_a[2] != orders_a[0] || orders_a[3] != orders_a[0]);
}

TEST(TokenLoader, ResumesExactlyFromASavedPosition) {
  TempDir dir("ft_tokens");
  const int64_t B = 2, T = 4;
  for (int i = 0; i < 3; ++i) {
    const auto tokens = random_tokens(static_cast<size_t>(30 + 11 * i), kGpt2Vocab, 200 + static_cast<uint64_t>(i));
    write_file(dir.file("s" + std::to_string(i) + ".bin"), shard_bytes(tokens));
  }
  const TokenLoader::Options options{
      .batch_size = B, .seq_len = T, .vocab_size = kGpt2Vocab, .seed = 3, .shuffle = true};
  TokenLoader run(dir.file("s*.bin"), options);
  const std::vector<int32_t> very_first = flat(run.next_batch());
  // Into the second epoch, so the saved position depends on a shuffled order the fresh loader
  // has not drawn yet.
  for (int64_t i = 1; i < run.batches_per_epoch() + 3; ++i) run.next_batch();
  const TokenPosition saved = run.position();
  ASSERT_EQ(saved.epoch, 1);
  std::vector<std::vector<int32_t>> expected;  // across file and epoch boundaries
  for (int64_t i = 0; i < 2 * run.batches_per_epoch(); ++i) expected.push_back(flat(run.next_batch()));
  const TokenPosition end = run.position();

  TokenLoader resumed(dir.file("s*.bin"), options);
  resumed.set_position(saved);
  EXPECT_EQ(resumed.position(), saved);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(flat(resumed.next_batch()), expected[i]) << i;
  EXPECT_EQ(resumed.position(), end);

  run.set_position(saved);  // backwards, in the same loader
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(flat(run.next_batch()), expected[i]) << i;

  run.reset();
  EXPECT_EQ(run.position(), TokenPosition{});
  EXPECT_EQ(flat(run.next_batch()), very_first);

  // Positions that cannot start a batch are refused and leave the loader where it was.
  const TokenPosition before = run.position();
  // The last two: a saved offset near 2^63 (a corrupt checkpoint's position) overflowed the check
  // offset + B·T + 1 <= length, passed it, and had next_batch() read 2^63 tokens past the file.
  for (const TokenPosition& bad : {TokenPosition{-1, 0, 0}, TokenPosition{0, 3, 0}, TokenPosition{0, -1, 0},
                                   TokenPosition{0, 0, -1}, TokenPosition{2, 0, 60},
                                   TokenPosition{0, 0, std::numeric_limits<int64_t>::max()},
                                   TokenPosition{0, 0, std::numeric_limits<int64_t>::max() - 8}})
    EXPECT_THROW(run.set_position(bad), Error);
  EXPECT_EQ(run.position(), before);
  run.set_position({});
  EXPECT_EQ(flat(run.next_batch()), very_first);
}

TEST(TokenLoader, ReadsTextAsBytes) {
  TempDir dir("ft_tokens");
  const int64_t B = 3, T = 5;
  const std::vector<uint16_t> bytes = random_tokens(50, 256, 300);
  write_file(dir.file("input.txt"), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  TokenLoader loader(dir.file("input.txt"),
                     {.batch_size = B, .seq_len = T, .vocab_size = 256, .format = TokenFormat::Text});
  ASSERT_EQ(loader.batches_per_epoch(), (50 - 1) / (B * T));
  for (int64_t epoch = 0; epoch < 2; ++epoch)
    for (int64_t offset = 0; offset + B * T + 1 <= 50; offset += B * T) {
      EXPECT_EQ(loader.position(), (TokenPosition{epoch, 0, offset}));
      expect_batch(loader.next_batch(), bytes, offset, B, T);
    }

  // A byte outside a smaller vocabulary is caught like a shard's token.
  std::vector<uint8_t> ascii(40, 'a');
  ascii[23] = 0xC3;
  write_file(dir.file("latin1.txt"), ascii);
  TokenLoader narrow(dir.file("latin1.txt"),
                     {.batch_size = 1, .seq_len = 8, .vocab_size = 128, .format = TokenFormat::Text});
  expect_error([&] { narrow.next_batch(); }, {"latin1.txt", "195", "23"});

  // The format is stated, never sniffed: a text file read as shards is rejected.
  write_file(dir.file("long.txt"), std::vector<uint8_t>(2000, 'x'));
  expect_error([&] { TokenLoader(dir.file("long.txt"), {.batch_size = 1, .seq_len = 1, .vocab_size = 256}); },
               {"long.txt", "magic"});
}

TEST(TokenLoader, ReadsAndWritesBothShardForms) {
  // A vocabulary past 65,536 (Llama 3's 128,256) needs uint32 tokens: llm.c's Llama 3 form.
  TempDir dir("ft_tokens");
  std::vector<uint32_t> wide(41);
  std::mt19937 rng(17);
  for (uint32_t& t : wide) t = rng() % 128256;
  wide[3] = 128255;  // past uint16
  write_token_shard(dir.file("wide.bin"), wide, 128256);
  std::vector<uint8_t> bytes(4);
  std::ifstream(dir.file("wide.bin"), std::ios::binary).read(reinterpret_cast<char*>(bytes.data()), 4);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0xA1, 0xD9, 0x34, 0x01}));  // 20240801, little-endian
  TokenLoader loader(dir.file("wide.bin"), {.batch_size = 2, .seq_len = 20, .vocab_size = 128256});
  const TokenBatch b = loader.next_batch();
  EXPECT_EQ(values(b.inputs), std::vector<int32_t>(wide.begin(), wide.begin() + 40));
  EXPECT_EQ(values(b.targets), std::vector<int32_t>(wide.begin() + 1, wide.begin() + 41));
  // GPT-2's form for a vocabulary that fits uint16: the very bytes llm.c writes.
  const std::vector<uint16_t> narrow = random_tokens(30, kGpt2Vocab, 5);
  write_token_shard(dir.file("narrow.bin"), std::vector<uint32_t>(narrow.begin(), narrow.end()), kGpt2Vocab);
  std::ifstream in(dir.file("narrow.bin"), std::ios::binary);
  const std::vector<uint8_t> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, shard_bytes(narrow));
  // The right width for the wrong magic is refused, and so is an id past the vocabulary.
  std::vector<uint8_t> mixed = shard_bytes(narrow, 20240801, 7);
  write_file(dir.file("mixed.bin"), mixed);
  expect_error([&] { TokenLoader(dir.file("mixed.bin"), {.batch_size = 1, .seq_len = 4, .vocab_size = 128256}); },
               {"mixed.bin", "header promises 30 tokens"});
  expect_error([&] { write_token_shard(dir.file("bad.bin"), std::vector<uint32_t>{1, 70000}, 65536); },
               {"token 1 is 70000", "65536"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.bin")));
}

TEST(TokenLoader, RejectsMalformedShards) {
  TempDir dir("ft_tokens");
  const TokenLoader::Options options{.batch_size = 2, .seq_len = 4, .vocab_size = kGpt2Vocab};
  const std::vector<uint16_t> tokens = random_tokens(40, kGpt2Vocab, 400);
  auto open = [&](const std::string& name) { return [&, name] { TokenLoader(dir.file(name), options); }; };

  write_file(dir.file("magic.bin"), shard_bytes(tokens, 20240521));
  expect_error(open("magic.bin"), {"magic.bin", "magic 20240521", "20240520"});
  write_file(dir.file("version.bin"), shard_bytes(tokens, 20240520, 2));
  expect_error(open("version.bin"), {"version.bin", "version 2"});
  write_file(dir.file("negative.bin"), shard_bytes({}, 20240520, 1, -5));
  expect_error(open("negative.bin"), {"negative.bin", "negative", "-5"});

  std::vector<uint8_t> cut = shard_bytes(tokens);
  cut.pop_back();
  write_file(dir.file("truncated.bin"), cut);
  expect_error(open("truncated.bin"), {"truncated.bin", "truncated"});
  const std::vector<uint8_t> whole = shard_bytes(tokens);
  write_file(dir.file("header.bin"), std::vector<uint8_t>(whole.begin(), whole.begin() + 100));
  expect_error(open("header.bin"), {"header.bin", "truncated", "header"});
  std::vector<uint8_t> longer = shard_bytes(tokens);
  longer.push_back(0);
  longer.push_back(0);
  write_file(dir.file("oversized.bin"), longer);
  expect_error(open("oversized.bin"), {"oversized.bin", "trailing"});

  // B·T + 1 = 9 tokens is the least a file may hold.
  write_file(dir.file("short.bin"), shard_bytes(random_tokens(8, kGpt2Vocab, 401)));
  expect_error(open("short.bin"), {"short.bin", "8 tokens", "9"});
  write_file(dir.file("just.bin"), shard_bytes(random_tokens(9, kGpt2Vocab, 402)));
  EXPECT_EQ(TokenLoader(dir.file("just.bin"), options).batches_per_epoch(), 1);

  expect_error(open("nothing_*.bin"), {"nothing_*.bin", "no file matches"});
  expect_error([&] { TokenLoader(dir.file("just.bin"), {.batch_size = 0, .seq_len = 4, .vocab_size = 10}); },
               {"positive"});
  // B·T would overflow int64 in every position check.
  const TokenLoader::Options huge{.batch_size = int64_t{1} << 32, .seq_len = int64_t{1} << 32, .vocab_size = 10};
  expect_error([&] { TokenLoader(dir.file("just.bin"), huge); }, {"B*T*ranks", "out of range"});
}

TEST(TokenLoader, RejectsATokenOutsideTheVocabularyWhenItsShardIsRead) {
  TempDir dir("ft_tokens");
  const int vocab = 1000;
  const TokenLoader::Options options{.batch_size = 2, .seq_len = 4, .vocab_size = vocab};
  const std::vector<uint16_t> good = random_tokens(20, vocab, 500);
  std::vector<uint16_t> bad = random_tokens(30, vocab, 501);
  bad[17] = static_cast<uint16_t>(vocab + 234);
  write_file(dir.file("a.bin"), shard_bytes(good));
  write_file(dir.file("b.bin"), shard_bytes(bad));
  // Headers are fine, so construction succeeds; the ids are checked when b.bin is read.
  TokenLoader loader(dir.file("*.bin"), options);
  for (int64_t offset = 0; offset + 9 <= 20; offset += 8) expect_batch(loader.next_batch(), good, offset, 2, 4);
  const TokenPosition at = loader.position();
  ASSERT_EQ(at, (TokenPosition{0, 1, 0}));
  expect_error([&] { loader.next_batch(); }, {"b.bin", "1234", "position 17"});
  EXPECT_EQ(loader.position(), at);
  expect_error([&] { loader.next_batch(); }, {"b.bin"});  // still failing, not reading stale tokens
}

}  // namespace
}  // namespace ft
