// A rank's heartbeat, for naming the rank that stopped answering when a collective fails: every
// rank rewrites a file in the run's rendezvous folder twice a second ("alive", or "failed" once a
// collective of its own failed, so that the others blame the rank that went silent, not the ones
// that gave up on it). A killed or stopped process's file goes stale within 2 s.
#pragma once
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace ft {

/// The folder a run's processes meet in on this machine (Gloo's FileStore, the heartbeats):
/// `store_dir`, else $FT_STORE_DIR, else /tmp/fusedtrain-rendezvous; then "ft-<run id>".
std::filesystem::path rendezvous_folder(const std::string& store_dir, const std::string& run_id);

class Heartbeat {
 public:
  /// An empty folder: no heartbeats (a Redis rendezvous), and silent_ranks() names nobody.
  /// `blame_missing`: a rank whose file does not exist counts as silent (every rank writes in
  /// this folder, a shared one); otherwise only a stale file does (NCCL's ranks on other hosts
  /// write into their own /tmp).
  Heartbeat(std::filesystem::path folder, int rank, int world, bool blame_missing);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void mark_failed();
  /// The ranks that stopped answering (heartbeat stale, or gone with blame_missing, without having
  /// failed themselves), as "rank 2, rank 3"; waits up to 5 s for one to show (a killed peer's
  /// socket closes before its heartbeat is stale). Empty when none does.
  std::string silent_ranks() const;

 private:
  std::filesystem::path path(int rank) const;
  void write(const std::string& state) const;

  std::filesystem::path folder_;
  int rank_, world_;
  bool blame_missing_;
  std::string state_ = "alive";
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

}  // namespace ft
