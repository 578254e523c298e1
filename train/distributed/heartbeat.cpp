#include "train/distributed/heartbeat.h"

#include <chrono>
#include <cstdlib>
#include <fstream>

namespace ft {

namespace fs = std::filesystem;

namespace {

constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(500);
constexpr auto kHeartbeatStale = std::chrono::milliseconds(2000);
// A peer's closed socket is seen before its heartbeat goes stale: look this long for the rank.
constexpr auto kBlameWait = std::chrono::milliseconds(5000);

}  // namespace

fs::path rendezvous_folder(const std::string& store_dir, const std::string& run_id) {
  const fs::path root = !store_dir.empty()            ? fs::path(store_dir)
                        : std::getenv("FT_STORE_DIR") ? fs::path(std::getenv("FT_STORE_DIR"))
                                                      : fs::path("/tmp/fusedtrain-rendezvous");
  return root / ("ft-" + run_id);
}

Heartbeat::Heartbeat(fs::path folder, int rank, int world, bool blame_missing)
    : folder_(std::move(folder)), rank_(rank), world_(world), blame_missing_(blame_missing) {
  if (folder_.empty()) return;
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) {  // no heartbeats: the errors then say less, nothing else changes
    folder_.clear();
    return;
  }
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      write(state_);
      wake_.wait_for(lock, kHeartbeatPeriod, [this] { return stop_; });
    }
  });
}

Heartbeat::~Heartbeat() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (state_ == "alive") {
    std::error_code ec;
    fs::remove(path(rank_), ec);
    fs::remove(folder_, ec);  // only when empty: the last rank of a clean run removes it
  }
}

void Heartbeat::mark_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = "failed";
  if (!folder_.empty()) write(state_);
}

std::string Heartbeat::silent_ranks() const {
  if (folder_.empty()) return "";
  const auto give_up = std::chrono::steady_clock::now() + kBlameWait;
  for (;;) {
    std::string out;
    const auto now = fs::file_time_type::clock::now();
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      std::error_code ec;
      const auto written = fs::last_write_time(path(r), ec);
      if (ec && !blame_missing_) continue;
      std::string state;
      if (!ec) std::ifstream(path(r)) >> state;
      if (state == "failed") continue;
      if (ec || now - written > kHeartbeatStale) out += (out.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    if (!out.empty() || std::chrono::steady_clock::now() > give_up) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

fs::path Heartbeat::path(int rank) const { return folder_ / ("hb.alive." + std::to_string(rank)); }

void Heartbeat::write(const std::string& state) const {
  // Written beside and renamed, so a reader never sees a half-written file.
  const fs::path tmp = path(rank_).string() + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << state << "\n";
  std::error_code ec;
  fs::rename(tmp, path(rank_), ec);
}

}  // namespace ft
