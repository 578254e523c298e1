// Loads batches ahead of the training loop on a thread of its own and, on CUDA, uploads them
// without stalling it, so that reading and copying the next batch overlaps the current step.
//
// The loader thread fills `depth` host slots in turn (source.next_into; page-locked buffers on
// CUDA, fresh host tensors on the CPU) and queues them. On the CPU next() hands a queued batch
// over as it is. On CUDA the training thread enqueues the copy of a queued slot into one of
// `device_slots` device buffers on the copy stream, and the compute stream waits for that copy
// (an event, not a host wait) before its first use of the batch. upload_ahead() enqueues the
// next step's copies right after the current step: they then run beside it on the copy engine.
// A device slot is written again only after the compute work enqueued before release() is done,
// and a host slot only after its copy is done.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "train/data/batch_source.h"

namespace ft {

class Prefetcher {
 public:
  struct Options {
    Device device = kCPU;       ///< where next() delivers batches
    int64_t depth = 3;          ///< batches the loader thread keeps ready on the host
    int64_t device_slots = 2;   ///< CUDA: batches on the device at once, in use or uploaded ahead
  };
  /// Starts the loader thread, which reads `source` from its current position on. Until the
  /// prefetcher is destroyed nothing else may use the source.
  Prefetcher(BatchSource& source, Options options);
  /// Stops the loader thread (after the source call it is in, if any) and waits for the copies
  /// in flight. Never waits on a source that has no call running.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// The next batch, in source order, on options.device. CPU: the host tensors the source wrote,
  /// for the caller to keep. CUDA: device tensors the compute stream may read from now on (its
  /// later work is ordered after their upload), valid until the release() after this call: their
  /// memory then takes another batch. An error the source threw is rethrown here, as the
  /// ft::Error it was (other exceptions become one), once the batches loaded before it are taken.
  Batch next();
  /// The source's position after the last batch next() returned (before the first: where the
  /// source stood at construction), for a checkpoint that resumes with the batch after it.
  const DataPosition& position() const { return position_; }
  /// Ends the use of every batch next() has returned: their device memory takes new batches once
  /// the compute stream's work enqueued so far is done. Nothing on the CPU.
  void release();
  /// CUDA: enqueues the uploads of the next `count` batches now (those not uploaded yet), so that
  /// they overlap the compute work just enqueued; waits for the loader when it has not read them
  /// yet. Nothing on the CPU. More batches than the free device slots is an ft::Error.
  void upload_ahead(int64_t count);

 private:
  struct HostSlot;
  struct DeviceSlot;
  void load();               // the loader thread's body
  int64_t take_ready();      // a slot the loader filled (waits); rethrows the loader's error
  void give_back(int64_t slot);
  void upload_next();        // one ready host slot into an idle device slot, staged

  BatchSource& source_;
  Options options_;
  DataPosition position_;
  std::vector<std::unique_ptr<HostSlot>> host_;
  std::vector<std::unique_ptr<DeviceSlot>> device_;
  std::deque<int64_t> staged_, idle_;  // device slots: uploaded and not yet returned; free
  std::vector<int64_t> in_use_;        // device slots returned by next() since the last release()

  std::mutex mutex_;  // guards the loader's queues and flags below
  std::condition_variable changed_;
  std::deque<int64_t> free_, ready_;  // host slots
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread loader_;
};

}  // namespace ft
