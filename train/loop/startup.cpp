#include "train/loop/startup.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

namespace ft {

namespace {

using Clock = std::chrono::steady_clock;

// Taken during static initialization, before main runs.
const Clock::time_point process_start = Clock::now();

struct Phases {
  std::mutex mutex;
  Clock::time_point last = process_start;
  std::vector<std::pair<std::string, double>> seconds;
  bool done = false, summary_taken = false;
};

Phases& phases() {
  static Phases p;
  return p;
}

}  // namespace

double seconds_since_start() { return std::chrono::duration<double>(Clock::now() - process_start).count(); }

void mark_startup(const std::string& name) {
  Phases& p = phases();
  std::lock_guard<std::mutex> lock(p.mutex);
  const Clock::time_point now = Clock::now();
  const double s = std::chrono::duration<double>(now - p.last).count();
  p.last = now;
  for (auto& [phase, total] : p.seconds)
    if (phase == name) {
      total += s;
      return;
    }
  p.seconds.emplace_back(name, s);
}

void mark_startup_done(const std::string& name) {
  mark_startup(name);
  std::lock_guard<std::mutex> lock(phases().mutex);
  phases().done = true;
}

bool startup_done() {
  std::lock_guard<std::mutex> lock(phases().mutex);
  return phases().done;
}

std::string take_startup_summary() {
  {
    std::lock_guard<std::mutex> lock(phases().mutex);
    if (!phases().done || phases().summary_taken) return "";
    phases().summary_taken = true;
  }
  return startup_summary();
}

std::string startup_summary() {
  Phases& p = phases();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.seconds.empty()) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "start-up: %.2f s (launch to first step done: ",
                std::chrono::duration<double>(p.last - process_start).count());
  std::string out = buf;
  for (size_t i = 0; i < p.seconds.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f s", i ? ", " : "", p.seconds[i].first.c_str(), p.seconds[i].second);
    out += buf;
  }
  return out + ")";
}

}  // namespace ft
