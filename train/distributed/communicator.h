// Collectives between the processes of a data-parallel run. Every call is asynchronous: it
// returns a Work to wait on, and a backend keeps the calls' order (every rank must issue the same
// collectives in the same order, as with NCCL and Gloo themselves).
//
// Backends: Gloo for CPU tensors (train/distributed/gloo_communicator.h), NCCL for CUDA tensors
// (train/distributed/nccl_communicator.h); make_communicator picks one from the tensors' device. A
// collective that does not complete within the timeout, or whose peer has died, ends in an
// ft::Error naming the collective, the training step (set_step) and, where the backend can tell,
// the rank it waited for.
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/launch_env.h"
#include "lib/tensor.h"

namespace ft {

enum class CommOp { Sum, Average };

/// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  /// Returns once the result may be used: on the CPU when the collective is done; for NCCL when
  /// the compute stream is ordered after it (no host wait). A failure is an ft::Error here.
  virtual void wait() = 0;
};

struct CommOptions {
  std::chrono::milliseconds timeout{60000};
  /// Gloo's rendezvous folder (a FileStore), shared by all ranks; empty: $FT_STORE_DIR, else
  /// /tmp/fusedtrain-rendezvous (enough on one machine).
  std::string store_dir = {};
  /// Gloo across hosts: "host:port" of a Redis server for the rendezvous ($FT_REDIS), instead of
  /// the folder.
  std::string redis = {};
};

/// How a step's collectives of one label sat against the computation (NCCL, timed on the device).
struct CommTiming {
  int collectives = 0;
  double busy_ms = 0;     // the collectives' own time on the communication stream, summed
  double exposed_ms = 0;  // of it, what the computation waited for
  double hidden() const { return busy_ms > 0 ? 1.0 - exposed_ms / busy_ms : 1.0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// "gloo" or "nccl".
  virtual std::string backend() const = 0;

  /// In place: t = the sum (or mean) of every rank's t.
  virtual std::unique_ptr<Work> all_reduce(const Tensor& t, CommOp op) = 0;
  /// input [world · n] on every rank; out [n] = the sum (or mean) of every rank's slice
  /// [rank · n, (rank + 1) · n).
  virtual std::unique_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& out, CommOp op) = 0;
  /// input [n]; out [world · n] = every rank's input in rank order.
  virtual std::unique_ptr<Work> all_gather(const Tensor& input, const Tensor& out) = 0;
  /// all_reduce of `t` whose values cross the wire in `wire`'s dtype (bf16: half the bytes of f32):
  /// t is rounded into `wire` (as many elements, a buffer of the caller's that nothing else uses
  /// until the Work is done), reduced there, and widened back into t.
  virtual std::unique_ptr<Work> all_reduce_via(const Tensor& t, const Tensor& wire, CommOp op);
  /// reduce_scatter likewise: `input` rounded into `wire`, out = this rank's slice of the reduction.
  virtual std::unique_ptr<Work> reduce_scatter_via(const Tensor& input, const Tensor& wire, const Tensor& out,
                                                   CommOp op);
  /// Personalized exchange: `input` holds send_counts[d] elements for each rank d, one slice after
  /// the other in rank order; `out` receives recv_counts[s] elements from each rank s, likewise.
  /// Counts are elements, one per rank, known on the host (so a captured step can replay it):
  /// rank s's send_counts[r] must equal rank r's recv_counts[s]. Any dtype; input and out may
  /// not overlap.
  virtual std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                                           const Tensor& out, const std::vector<int64_t>& recv_counts) = 0;
  /// In place: t = root's t.
  virtual std::unique_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  virtual std::unique_ptr<Work> barrier() = 0;

  /// The training step the next collectives belong to, for error messages (called between steps,
  /// outside any captured graph).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  /// Called once the step set_step named is enqueued, before the host waits on it in any way: a
  /// backend that watches work on the device (NCCL, whose collectives a replayed graph runs
  /// unseen) marks the step's end there, so that a peer lost inside it ends this rank too.
  void step_enqueued() { step_enqueued(step_); }

  /// Times, on the device, the collectives enqueued from begin_timed_region() to
  /// end_timed_region() (data parallelism brackets each training step with them), each under the
  /// timing label current when it was enqueued (TimingLabel). A collective's exposed time is
  /// what ran after the point where the computation was ordered after it (its Work's wait()),
  /// or, for one never waited on, after mark_computation_done(). Backends that cannot time (Gloo)
  /// ignore all three.
  virtual void begin_timed_region() {}
  virtual void mark_computation_done() {}
  virtual void end_timed_region() {}
  /// The last timed region that has run (synchronizes), by label; empty when none was timed. In a
  /// replayed graph, the last replay's.
  virtual std::map<std::string, CommTiming> last_timing() { return {}; }

  /// The collectives enqueued while it lives are timed under `label` ("" is data parallelism's
  /// gradient reduction); the previous label returns after it.
  class TimingLabel {
   public:
    TimingLabel(Communicator& comm, std::string label)
        : comm_(comm), previous_(std::exchange(comm.timing_label_, std::move(label))) {}
    ~TimingLabel() { comm_.timing_label_ = std::move(previous_); }
    TimingLabel(const TimingLabel&) = delete;
    TimingLabel& operator=(const TimingLabel&) = delete;

   private:
    Communicator& comm_;
    std::string previous_;
  };
  const std::string& timing_label() const { return timing_label_; }

 protected:
  virtual void step_enqueued(int64_t) {}
  /// Checks a collective's tensor: defined, on `device`.
  static void check_tensor(const char* collective, const Tensor& t, Device device);
  /// The *_via collectives' wire buffer: as many elements as `t`, both on `device`.
  static void check_wire(const char* collective, const Tensor& t, const Tensor& wire, Device device);
  /// `whole` holds world_size() times the elements of `part`, of one dtype (reduce_scatter's
  /// input and output, all_gather's output and input), both on `device`.
  void check_parts(const char* collective, const Tensor& whole, const Tensor& part, Device device) const;
  /// all_to_all's tensors and counts: one count per rank, none negative, summing to the
  /// elements of input and out, one dtype, both on `device`.
  void check_exchange(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& out,
                      const std::vector<int64_t>& recv_counts, Device device) const;

 private:
  std::atomic<int64_t> step_{0};  // read by NCCL's watchdog thread
  std::string timing_label_;
};

/// The communicator of this process's run (launch env), for tensors on `device`: NCCL on CUDA,
/// Gloo on the CPU. A build without the backend the device needs is an ft::Error.
std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, Device device, const CommOptions& options);

}  // namespace ft
