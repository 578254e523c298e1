// ft-bench's results document and its side-by-side table with the PyTorch peers (host code): the
// JSON reads back what was written, bad peer files are named, peers from another GPU are refused,
// and the printed ratios are the ones the times give.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "bench/ft-bench/report.h"
#include "lib/error.h"
#include "tests/lib/test_util.h"
#include "tests/train/temp_dir.h"

namespace ft::bench {
namespace {

using test::error_mentions;

BenchDocument random_document(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> ms(0.01, 5000.0);
  BenchDocument d{.device = "NVIDIA H100 80GB HBM3", .date = "2026-11-25", .results = {}};
  const char* workloads[] = {"gpt2-124M", "bias+gelu (4C)", "attention HS64", "quote\" and \\ back"};
  for (const char* w : workloads)
    for (const char* v : {"fused", "unfused"})
      d.results.push_back({w, v, ms(rng), {{"graph", 1}, {"peak_gb", ms(rng) / 100}}});
  return d;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string times(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", x);
  return text;
}

TEST(BenchReport, DocumentReadsBackAsWritten) {
  std::mt19937_64 rng(std::random_device{}());
  const BenchDocument written = random_document(rng);
  const BenchDocument read = parse_bench_document(format_bench_document(written), "test");
  EXPECT_EQ(read.device, written.device);
  EXPECT_EQ(read.date, written.date);
  ASSERT_EQ(read.results.size(), written.results.size());
  for (size_t i = 0; i < read.results.size(); ++i) {
    EXPECT_EQ(read.results[i].workload, written.results[i].workload);
    EXPECT_EQ(read.results[i].variant, written.results[i].variant);
    EXPECT_EQ(read.results[i].ms, written.results[i].ms);  // json_number writes the shortest exact form
    EXPECT_EQ(read.results[i].extras, written.results[i].extras);
  }
}

TEST(BenchReport, BadDocumentsAreNamed) {
  const std::string head = "{\"device\": \"d\", \"date\": \"2026-11-25\", \"results\": [";
  EXPECT_TRUE(error_mentions([&] { parse_bench_document("[1]", "peer.json"); }, "peer.json"));
  EXPECT_TRUE(error_mentions([&] { parse_bench_document("{\"device\": \"d\", \"date\": \"x\"}", "f"); }, "\"results\""));
  EXPECT_TRUE(error_mentions([&] { parse_bench_document("{\"date\": \"x\", \"results\": []}", "f"); }, "\"device\""));
  EXPECT_TRUE(error_mentions([&] { parse_bench_document(head + "{\"variant\": \"v\", \"ms\": 1}]}", "f"); },
                             "results[0]: needs a non-empty string \"workload\""));
  EXPECT_TRUE(error_mentions(
      [&] { parse_bench_document(head + "{\"workload\": \"w\", \"variant\": \"\", \"ms\": 1}]}", "f"); }, "\"variant\""));
  EXPECT_TRUE(error_mentions(
      [&] { parse_bench_document(head + "{\"workload\": \"w\", \"variant\": \"v\", \"ms\": -2}]}", "f"); },
      "\"ms\" must be a positive number"));
  EXPECT_TRUE(error_mentions(
      [&] { parse_bench_document(head + "{\"workload\": \"w\", \"variant\": \"v\"}]}", "f"); }, "\"ms\""));
  EXPECT_TRUE(error_mentions(
      [&] {
        parse_bench_document(head + "{\"workload\": \"w\", \"variant\": \"v\", \"ms\": 1},"
                                    " {\"workload\": \"w\", \"variant\": \"v\", \"ms\": 1, \"peak_gb\": \"x\"}]}",
                             "f");
      },
      "results[1]: \"peak_gb\" must be a number"));
  EXPECT_TRUE(error_mentions([&] { parse_bench_document(head + "{\"workload\": \"w\"", "cut.json"); }, "cut.json"));
}

TEST(BenchReport, SideBySideRatiosComeFromTheTimes) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> ms(0.05, 500.0);
  const double fused = ms(rng), unfused = ms(rng), eager = ms(rng), compiled = ms(rng);
  test::TempDir dir("ft_bench_report");
  BenchDocument peers{.device = "GPU A", .date = "2026-11-25", .results = {}};
  peers.results.push_back({"gpt2-124M", "torch eager naive", eager, {}});
  peers.results.push_back({"gpt2-124M", "torch compile", compiled, {{"peak_gb", 7.5}}});
  peers.results.push_back({"other workload", "torch eager", 1.0, {}});
  write_text(dir.file("peers.json"), format_bench_document(peers));

  BenchReport report("GPU A", "2026-11-25");
  report.add_peers(dir.file("peers.json"));
  report.add("gpt2-124M", "fused", fused);
  report.add("gpt2-124M", "unfused", unfused);
  report.add("gpt2-124M", "fused+dp", 0.0);  // a variant that did not run is left out
  report.add("mlp-fmnist", "fused", ms(rng));
  EXPECT_EQ(report.ours().results.size(), 3u);
  const std::string table = report.side_by_side();
  for (const std::string& expected : {times(unfused / fused), times(unfused / eager), times(eager / fused),
                                      times(unfused / compiled), times(compiled / fused)})
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " not in\n" << table;
  EXPECT_NE(table.find("torch compile"), std::string::npos);
  EXPECT_EQ(table.find("other workload"), std::string::npos) << "a peer workload this run did not measure";
  EXPECT_NE(table.find("mlp-fmnist"), std::string::npos);
  EXPECT_NE(table.find("no PyTorch peer"), std::string::npos);
}

TEST(BenchReport, PeersFromAnotherDeviceOrAMissingFileAreRefused) {
  test::TempDir dir("ft_bench_report");
  write_text(dir.file("h200.json"), format_bench_document({.device = "NVIDIA H200", .date = "2026-11-25",
                                                           .results = {{"gpt2-124M", "torch eager", 140.0, {}}}}));
  write_text(dir.file("broken.json"), "{\"device\": \"NVIDIA H100 80GB HBM3\", \"results\": [");
  BenchReport report("NVIDIA H100 80GB HBM3", "2026-11-25");
  EXPECT_TRUE(error_mentions([&] { report.add_peers(dir.file("h200.json")); }, "measured on 'NVIDIA H200'"));
  EXPECT_TRUE(error_mentions([&] { report.add_peers(dir.file("missing.json")); }, "cannot open"));
  EXPECT_TRUE(error_mentions([&] { report.add_peers(dir.file("broken.json")); }, "broken.json"));
}

TEST(BenchReport, JsonFileHoldsOurResultsOnly) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> ms(0.05, 500.0);
  test::TempDir dir("ft_bench_report");
  write_text(dir.file("peers.json"), format_bench_document({.device = "GPU", .date = "2026-11-25",
                                                            .results = {{"adamw-gpt2", "torch fused", 2.0, {}}}}));
  BenchReport report("GPU", utc_date_today());
  report.add_peers(dir.file("peers.json"));
  const double fused = ms(rng), unfused = ms(rng);
  report.add("adamw-gpt2", "fused", fused, {{"graph", 1}});
  report.add("adamw-gpt2", "unfused", unfused, {{"graph", 1}});
  report.write_json(dir.file("ours.json"));
  std::ifstream in(dir.file("ours.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const BenchDocument read = parse_bench_document(text, "ours.json");
  EXPECT_EQ(read.device, "GPU");
  EXPECT_EQ(read.date.size(), 10u);
  ASSERT_EQ(read.results.size(), 2u);
  EXPECT_EQ(read.results[0].ms, fused);
  EXPECT_EQ(read.results[1].ms, unfused);
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2) << "the temporary file was renamed over ours.json";
}

}  // namespace
}  // namespace ft::bench
