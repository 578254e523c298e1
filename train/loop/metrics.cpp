#include "train/loop/metrics.h"

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

std::string json_number(const std::optional<double>& v) {
  if (!v) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", *v);
  return buf;
}
}  // namespace

MetricsLog::MetricsLog(std::string unit, const std::string& jsonl_path, std::string step_label)
    : unit_(std::move(unit)), step_label_(std::move(step_label)) {
  if (!jsonl_path.empty()) {
    file_.open(jsonl_path, std::ios::out | std::ios::trunc);
    FT_CHECK(file_.good(), "metrics: cannot open '", jsonl_path, "' for writing");
  }
}

std::string MetricsLog::format(const StepMetrics& m) const {
  char buf[256];
  // "loss 0.4123 (mean of 20)": the mean since the last line, which one batch's loss jumps around.
  char mean_of[32] = "";
  if (m.loss_steps > 1) std::snprintf(mean_of, sizeof mean_of, " (mean of %lld)", static_cast<long long>(m.loss_steps));
  int n = std::snprintf(buf, sizeof buf, "step %5lld/%lld | loss %.4f%s | lr %.2e | grad norm ",
                        static_cast<long long>(m.step), static_cast<long long>(m.total_steps), m.loss, mean_of, m.lr);
  std::string line(buf, static_cast<size_t>(n));
  if (m.grad_norm) {
    std::snprintf(buf, sizeof buf, "%.3f", *m.grad_norm);
    line += buf;
  } else {
    line += "-";
  }
  std::snprintf(buf, sizeof buf, " | %.2f ms", m.ms);
  line += buf;
  if (m.step_ms) {
    std::snprintf(buf, sizeof buf, " | %s %.2f ms", step_label_.c_str(), *m.step_ms);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, " | %s %s/s", human(m.items_per_s).c_str(), unit_.c_str());
  line += buf;
  if (m.ranks > 1) {
    std::snprintf(buf, sizeof buf, " | %d ranks, %s %s a step", m.ranks, human(static_cast<double>(m.items_per_step)).c_str(),
                  unit_.c_str());
    line += buf;
  }
  if (m.mfu) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", *m.mfu * 100.0);
    line += buf;
  } else if (m.mfu_expected) {
    line += " | MFU ?";
  }
  if (m.skipped_steps) line += " | skipped " + std::to_string(m.skipped_steps);
  return line;
}

std::string MetricsLog::json(const StepMetrics& m) const {
  char buf[512];
  auto opt = [](const std::optional<double>& v) { return v ? std::to_string(*v) : std::string("null"); };
  std::snprintf(buf, sizeof buf,
                "{\"step\": %lld, \"loss\": %.9g, \"loss_steps\": %lld, \"lr\": %.6e, \"grad_norm\": %s, \"ms\": %.4f, "
                "\"step_ms\": %s, \"%s_per_s\": %.1f, \"mfu\": %s, \"skipped_steps\": %lld}",
                static_cast<long long>(m.step), m.loss, static_cast<long long>(m.loss_steps), m.lr, opt(m.grad_norm).c_str(), m.ms,
                m.step_ms ? std::to_string(*m.step_ms).c_str() : "null", unit_.c_str(), m.items_per_s,
                opt(m.mfu).c_str(), static_cast<long long>(m.skipped_steps));
  return buf;
}

std::string MetricsLog::format_eval(int64_t step, const std::map<std::string, double>& metrics) const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "step %5lld", static_cast<long long>(step));
  std::string line = buf;
  for (const auto& [name, value] : metrics) {
    std::snprintf(buf, sizeof buf, " | %s %.4f", name.c_str(), value);
    line += buf;
  }
  return line;
}

void MetricsLog::log(const StepMetrics& m) {
  std::cout << format(m) << std::endl;
  append(json(m));
}

void MetricsLog::log_eval(int64_t step, const std::map<std::string, double>& metrics) {
  std::cout << format_eval(step, metrics) << std::endl;
  std::string json = "{\"step\": " + std::to_string(step) + ", \"eval\": {";
  bool first = true;
  for (const auto& [name, value] : metrics) {
    json += (first ? "\"" : ", \"") + name + "\": " + json_number(value);
    first = false;
  }
  append(json + "}}");
}

void MetricsLog::append(const std::string& json_line) {
  if (!file_.is_open()) return;
  file_ << json_line << "\n";
  file_.flush();
}

}  // namespace ft
