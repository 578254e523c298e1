#include "bench/ft-bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "lib/error.h"
#include "train/io/atomic_file.h"
#include "train/io/json.h"

namespace ft::bench {

namespace {

const JsonValue& member(const JsonValue& object, const std::string& key, JsonValue::Kind kind, const std::string& where) {
  const JsonValue* value = object.find(key);
  FT_CHECK(value && value->kind == kind && (kind != JsonValue::Kind::String || !value->text.empty()), where,
           ": needs a ", kind == JsonValue::Kind::String ? "non-empty string" : "list", " \"", key, "\"");
  return *value;
}

BenchResult parse_result(const JsonValue& value, const std::string& where) {
  FT_CHECK(value.kind == JsonValue::Kind::Object, where, ": not an object");
  BenchResult result;
  result.workload = member(value, "workload", JsonValue::Kind::String, where).text;
  result.variant = member(value, "variant", JsonValue::Kind::String, where).text;
  for (const auto& [key, field] : value.members) {
    if (key == "workload" || key == "variant") continue;
    FT_CHECK(field.is_number(), where, ": \"", key, "\" must be a number");
    if (key == "ms")
      result.ms = field.number;
    else
      result.extras.emplace_back(key, field.number);
  }
  FT_CHECK(result.ms > 0, where, ": \"ms\" must be a positive number");
  return result;
}

std::string ratio(double numerator, double denominator) {
  if (numerator <= 0 || denominator <= 0) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", numerator / denominator);
  return text;
}

std::string milliseconds(double ms) {
  if (ms <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, ms >= 100 ? "%.1f" : "%.3f", ms);
  return text;
}

}  // namespace

BenchDocument parse_bench_document(const std::string& text, const std::string& context) {
  const JsonValue root = parse_json(text, context);
  FT_CHECK(root.kind == JsonValue::Kind::Object, context, ": expected an object with \"device\", \"date\" and \"results\"");
  BenchDocument document;
  document.device = member(root, "device", JsonValue::Kind::String, context).text;
  document.date = member(root, "date", JsonValue::Kind::String, context).text;
  const JsonValue& results = member(root, "results", JsonValue::Kind::Array, context);
  for (size_t i = 0; i < results.items.size(); ++i)
    document.results.push_back(parse_result(results.items[i], context + ": results[" + std::to_string(i) + "]"));
  return document;
}

std::string format_bench_document(const BenchDocument& document) {
  std::string json = "{\"device\": " + json_quote(document.device) + ", \"date\": " + json_quote(document.date) +
                     ", \"results\": [";
  for (size_t i = 0; i < document.results.size(); ++i) {
    const BenchResult& r = document.results[i];
    json += std::string(i ? ",\n " : "\n ") + "{\"workload\": " + json_quote(r.workload) +
            ", \"variant\": " + json_quote(r.variant) + ", \"ms\": " + json_number(r.ms);
    for (const auto& [key, value] : r.extras) json += ", " + json_quote(key) + ": " + json_number(value);
    json += "}";
  }
  return json + "]}\n";
}

std::string utc_date_today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

BenchReport::BenchReport(std::string device, std::string date) {
  ours_.device = std::move(device);
  ours_.date = std::move(date);
}

void BenchReport::add(std::string workload, std::string variant, double ms,
                      std::vector<std::pair<std::string, double>> extras) {
  if (!(ms > 0) || !std::isfinite(ms)) return;
  for (const auto& [key, value] : extras)
    FT_CHECK(std::isfinite(value), "ft-bench: result ", workload, " / ", variant, ": \"", key, "\" is not finite");
  ours_.results.push_back({std::move(workload), std::move(variant), ms, std::move(extras)});
}

void BenchReport::add_peers(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in, "ft-bench --peers: cannot open '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  const BenchDocument peers = parse_bench_document(text.str(), "ft-bench --peers " + path);
  FT_CHECK(peers.device == ours_.device, "ft-bench --peers ", path, ": measured on '", peers.device,
           "', this run is on '", ours_.device, "': times from two GPUs are not compared");
  peers_.insert(peers_.end(), peers.results.begin(), peers.results.end());
}

std::string BenchReport::side_by_side() const {
  std::vector<std::string> workloads;
  for (const BenchResult& r : ours_.results)
    if (std::find(workloads.begin(), workloads.end(), r.workload) == workloads.end()) workloads.push_back(r.workload);
  if (workloads.empty()) return "";
  auto ms_of = [](const std::vector<BenchResult>& results, const std::string& workload, const std::string& variant) {
    for (const BenchResult& r : results)
      if (r.workload == workload && r.variant == variant) return r.ms;
    return 0.0;
  };
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %10s %10s %13s  %-28s %10s %15s %13s\n", "workload (median ms)", "fused",
                "unfused", "unfused/fused", "PyTorch", "ms", "unfused/PyTorch", "PyTorch/fused");
  out += line;
  for (const std::string& workload : workloads) {
    const double fused = ms_of(ours_.results, workload, "fused"), unfused = ms_of(ours_.results, workload, "unfused");
    std::snprintf(line, sizeof line, "%-24s %10s %10s %13s", workload.c_str(), milliseconds(fused).c_str(),
                  milliseconds(unfused).c_str(), ratio(unfused, fused).c_str());
    std::string head = line;
    bool any_peer = false;
    for (const BenchResult& peer : peers_) {
      if (peer.workload != workload) continue;
      std::snprintf(line, sizeof line, "  %-28s %10s %15s %13s\n", peer.variant.c_str(), milliseconds(peer.ms).c_str(),
                    ratio(unfused, peer.ms).c_str(), ratio(peer.ms, fused).c_str());
      out += (any_peer ? std::string(head.size(), ' ') : head) + line;
      any_peer = true;
    }
    if (!any_peer) out += head + "  (no PyTorch peer result for this workload)\n";
  }
  return out + "(unfused/PyTorch above 1: unfused mode is slower than the peer; PyTorch/fused: fused's speed-up over it)\n";
}

void BenchReport::write_json(const std::string& path) const {
  write_file_atomically(path, format_bench_document(ours_), "ft-bench --json");
}

}  // namespace ft::bench
