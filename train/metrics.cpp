#include "train/metrics.h"

#include <cstdio>
#include <iostream>

#include "lib/error.h"

namespace ft {

namespace {
std::string human(double per_s) {
  char buf[32];
  if (per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  else if (per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", per_s);
  return buf;
}
}  // namespace

MetricsLog::MetricsLog(std::string unit, const std::string& jsonl_path) : unit_(std::move(unit)) {
  if (!jsonl_path.empty()) {
    file_.open(jsonl_path, std::ios::out | std::ios::trunc);
    FT_CHECK(file_.good(), "metrics: cannot open '", jsonl_path, "' for writing");
  }
}

std::string MetricsLog::format(const StepMetrics& m) const {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "step %5lld/%lld | loss %.4f | lr %.2e | grad norm ",
                        static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.loss, m.lr);
  std::string line(buf, static_cast<size_t>(n));
  if (m.grad_norm) {
    std::snprintf(buf, sizeof buf, "%.3f", *m.grad_norm);
    line += buf;
  } else {
    line += "-";
  }
  std::snprintf(buf, sizeof buf, " | %.2f ms | %s %s/s", m.ms, human(m.items_per_s).c_str(), unit_.c_str());
  line += buf;
  if (m.mfu) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", *m.mfu * 100.0);
    line += buf;
  }
  if (m.skipped_steps) line += " | skipped " + std::to_string(m.skipped_steps);
  return line;
}

std::string MetricsLog::json(const StepMetrics& m) const {
  char buf[512];
  auto opt = [](const std::optional<double>& v) { return v ? std::to_string(*v) : std::string("null"); };
  std::snprintf(buf, sizeof buf,
                "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6e, \"grad_norm\": %s, \"ms\": %.4f, \"%s_per_s\": %.1f, "
                "\"mfu\": %s, \"skipped_steps\": %lld}",
                static_cast<long long>(m.step), m.loss, m.lr, opt(m.grad_norm).c_str(), m.ms, unit_.c_str(),
                m.items_per_s, opt(m.mfu).c_str(), static_cast<long long>(m.skipped_steps));
  return buf;
}

void MetricsLog::log(const StepMetrics& m) {
  std::cout << format(m) << std::endl;
  if (file_.is_open()) {
    file_ << json(m) << "\n";
    file_.flush();
  }
}

}  // namespace ft
