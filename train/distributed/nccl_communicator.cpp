#include "train/distributed/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "lib/cuda/runtime.h"
#include "lib/error.h"
#include "lib/runtime/elements.h"
#include "lib/ops/elementwise/elementwise_cuda.h"
#include "train/distributed/heartbeat.h"
#include "train/distributed/tcp_store.h"

namespace ft {

namespace {

#define FT_NCCL_CHECK(expr, what)                                                                       \
  do {                                                                                                 \
    const ncclResult_t ft_nccl_ = (expr);                                                              \
    FT_CHECK(ft_nccl_ == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(ft_nccl_), " (", \
             ncclGetLastError(nullptr), ")");                                                          \
  } while (0)

ncclDataType_t nccl_type(DType dtype, const char* collective) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I64: return ncclInt64;
    case DType::I32: return ncclInt32;
    default: FT_FAIL(collective, ": NCCL does not take ", dtype_name(dtype), " tensors here");
  }
}

/// The id every rank of the run passes to ncclCommInitRank. Under torchrun, whose agent holds
/// MASTER_PORT with its TCPStore, rank 0 draws it (NCCL's bootstrap then listens on a port of its
/// own choosing, on rank 0's host) and puts it in that store; the others read it there. Other
/// launchers leave the port free: NCCL_COMM_ID=MASTER_ADDR:MASTER_PORT, where rank 0's bootstrap
/// listens, derives the same id on every rank with no exchange.
ncclUniqueId unique_id(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  if (!env.agent_store) {
    if (!std::getenv("NCCL_COMM_ID")) {
      const std::string address = env.master_addr + ":" + std::to_string(env.master_port);
      ::setenv("NCCL_COMM_ID", address.c_str(), 0);
    }
    FT_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    return id;
  }
  // Communicators are made in the same order on every rank: the n-th of each process meet.
  static int communicators_made = 0;
  const std::string key = "fusedtrain/" + env.run_id + "/attempt" + std::to_string(env.restart_count) +
                          "/nccl-unique-id/" + std::to_string(communicators_made++);
  TcpStoreClient store(env.master_addr, env.master_port, timeout);
  if (env.rank == 0) {
    FT_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    const std::vector<uint8_t> bytes = store.get(key, timeout);
    FT_CHECK(bytes.size() == sizeof(id), "torchrun's store: '", key, "' holds ", bytes.size(), " bytes, not an NCCL id (",
             sizeof(id), ")");
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  return id;
}

// ---- Timing a region's collectives (begin_timed_region) ----
// Events with timing, recorded as graph nodes too (cudaEventRecordExternal), so that a replayed
// step re-records them: after the run they hold the last replay's times.

cudaEvent_t timing_event() {
  cudaEvent_t e;
  FT_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void record_timing(cudaEvent_t e, cudaStream_t on) {
  // The external flag is for a capture only; outside one CUDA refuses it.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  FT_CUDA_CHECK(cudaStreamIsCapturing(on, &capturing));
  FT_CUDA_CHECK(cudaEventRecordWithFlags(e, on, capturing == cudaStreamCaptureStatusNone ? cudaEventRecordDefault
                                                                                          : cudaEventRecordExternal));
}

/// One timed collective: its span on the communication stream, and where the compute stream was
/// ordered after it (`waited`: its Work's wait() ran in this step).
struct TimedCollective {
  cudaEvent_t start = timing_event(), end = timing_event(), reached = timing_event();
  std::string label;
  bool waited = false;
  TimedCollective() = default;
  TimedCollective(const TimedCollective&) = delete;
  TimedCollective& operator=(const TimedCollective&) = delete;
  ~TimedCollective() {
    for (cudaEvent_t e : {start, end, reached}) cudaEventDestroy(e);
  }
};

/// The compute stream waits for this event: recorded on the communication stream after the
/// collective. A timed collective's wait marks where the computation reached it.
class NcclWork : public Work {
 public:
  NcclWork(cudaEvent_t done, TimedCollective* timed) : done_(done), timed_(timed) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  void wait() override {
    if (timed_ && !timed_->waited) {
      record_timing(timed_->reached, cuda::stream());
      timed_->waited = true;
    }
    FT_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), done_, 0));
  }

 private:
  cudaEvent_t done_;
  TimedCollective* timed_;  // owned by the communicator, which outlives its work
};

constexpr auto kAbortGrace = std::chrono::seconds(3);

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, Device device, const CommOptions& options)
      : rank_(env.rank), world_(env.world_size), device_(device), timeout_(options.timeout) {
    const ncclUniqueId id = unique_id(env, timeout_);
    // NCCL's support for mixing captured and non-captured launches (on by default) costs about
    // 0.45 ms a collective in a replayed graph: on two H200s an 8B step of 1,226 buckets took
    // 1,083 ms with it and 534 ms with NCCL_GRAPH_MIXING_SUPPORT=0. ParameterStore's cap of 64
    // buckets brought the step to 451 ms with it on, and off added nothing measurable there, so
    // it stays on; a user who turns it off gets the one rule NCCL then asks for kept by
    // on_comm_stream: no non-captured launch while a graph launch is outstanding.
    const char* mixing = std::getenv("NCCL_GRAPH_MIXING_SUPPORT");
    mixing_support_ = !mixing || std::string(mixing) != "0";
    {
      // ncclCommInitRank waits for every rank, forever: one that never starts ends this process
      // with the error after the timeout (there is no communicator to abort yet).
      const std::string bootstrap = env.agent_store ? "rank 0's id from torchrun's store at " + env.master_addr +
                                                          ":" + std::to_string(env.master_port)
                                                    : "NCCL_COMM_ID=" + std::string(std::getenv("NCCL_COMM_ID"));
      std::mutex mutex;
      std::condition_variable joined;
      bool done = false;
      std::thread guard([&] {
        std::unique_lock<std::mutex> lock(mutex);
        if (joined.wait_for(lock, timeout_, [&] { return done; })) return;
        std::fprintf(stderr,
                     "error: NCCL: rank %d of %d could not join the run within %.1f s (--comm-timeout): "
                     "another rank did not start or cannot reach it (bootstrap: %s)\n",
                     rank_, world_, timeout_.count() / 1000.0, bootstrap.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      });
      const ncclResult_t result = ncclCommInitRank(&comm_, world_, id, rank_);
      {
        std::lock_guard<std::mutex> lock(mutex);
        done = true;
      }
      joined.notify_one();
      guard.join();
      FT_NCCL_CHECK(result, "ncclCommInitRank");
    }
    // At the highest priority, so that a reduction's blocks are scheduled ahead of the backward's
    // waiting ones when a multiprocessor frees up (on two H200s it did not measurably change the
    // gpt2 step; docs/history/performance-log.md). FT_COMM_STREAM_PRIORITY=normal leaves it at
    // the default, for comparisons.
    int lowest = 0, highest = 0;
    FT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    const char* priority = std::getenv("FT_COMM_STREAM_PRIORITY");
    const bool normal = priority && std::strcmp(priority, "normal") == 0;
    FT_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, normal ? 0 : highest));
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    heartbeat_ = std::make_unique<Heartbeat>(rendezvous_folder(options.store_dir, env.run_id), rank_, world_,
                                             /*blame_missing=*/false);
    poller_ = std::thread([this] { poll_device(); });
    monitor_ = std::thread([this] { monitor(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    poller_.join();
    monitor_.join();
    for (const Watched& w : watched_) cudaEventDestroy(w.done);
    timed_.clear();
    if (compute_done_) cudaEventDestroy(compute_done_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(compute_ready_);
    cudaStreamDestroy(comm_stream_);
  }

  /// At world size 1 the average is the sum, which NCCL's one-rank path does without touching
  /// the buffer (for ncclAvg it would scale it: a pass over every gradient).
  ncclRedOp_t reduction(CommOp op) const { return op == CommOp::Average && world_ > 1 ? ncclAvg : ncclSum; }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce(const Tensor& t, CommOp op) override {
    check_tensor("all_reduce", t, device_);
    return on_comm_stream("ncclAllReduce", [&] {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype(), "all_reduce"),
                           reduction(op), comm_, comm_stream_);
    });
  }
  std::unique_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& out, CommOp op) override {
    check_parts("reduce_scatter", input, out, device_);
    return on_comm_stream("ncclReduceScatter", [&] {
      return ncclReduceScatter(input.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                               nccl_type(out.dtype(), "reduce_scatter"), reduction(op),
                               comm_, comm_stream_);
    });
  }
  std::unique_ptr<Work> all_gather(const Tensor& input, const Tensor& out) override {
    check_parts("all_gather", out, input, device_);
    return on_comm_stream("ncclAllGather", [&] {
      return ncclAllGather(input.data_ptr(), out.data_ptr(), static_cast<size_t>(input.numel()),
                           nccl_type(input.dtype(), "all_gather"), comm_, comm_stream_);
    });
  }
  // The casts run on the communication stream, beside backward, like the collective between them.
  std::unique_ptr<Work> all_reduce_via(const Tensor& t, const Tensor& wire, CommOp op) override {
    check_wire("all_reduce_via", t, wire, device_);
    return on_comm_stream("ncclAllReduce", [&] {
      cast_on_comm_stream(t, wire);
      const ncclResult_t result = ncclAllReduce(wire.data_ptr(), wire.data_ptr(), static_cast<size_t>(wire.numel()),
                                                nccl_type(wire.dtype(), "all_reduce_via"), reduction(op), comm_,
                                                comm_stream_);
      if (result == ncclSuccess) cast_on_comm_stream(wire, t);
      return result;
    });
  }
  std::unique_ptr<Work> reduce_scatter_via(const Tensor& input, const Tensor& wire, const Tensor& out,
                                           CommOp op) override {
    check_parts("reduce_scatter_via", input, out, device_);
    check_wire("reduce_scatter_via", input, wire, device_);
    // In place, as NCCL allows: this rank's slice of the wire buffer receives its reduction.
    const Tensor slice = wire.narrow(0, rank_ * out.numel(), out.numel());
    return on_comm_stream("ncclReduceScatter", [&] {
      cast_on_comm_stream(input, wire);
      const ncclResult_t result = ncclReduceScatter(wire.data_ptr(), slice.data_ptr(), static_cast<size_t>(out.numel()),
                                                    nccl_type(wire.dtype(), "reduce_scatter_via"), reduction(op),
                                                    comm_, comm_stream_);
      if (result == ncclSuccess) cast_on_comm_stream(slice, out);
      return result;
    });
  }
  /// Grouped sends and receives, one pair a peer (the NCCL way to an uneven all-to-all).
  std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& out,
                                   const std::vector<int64_t>& recv_counts) override {
    check_exchange(input, send_counts, out, recv_counts, device_);
    const size_t size = dtype_size(input.dtype());
    return on_comm_stream("ncclSend/ncclRecv", [&] {
      ncclResult_t result = ncclGroupStart();
      size_t sent = 0, received = 0;
      for (int peer = 0; peer < world_ && result == ncclSuccess; ++peer) {
        const size_t send_bytes = static_cast<size_t>(send_counts[peer]) * size;
        const size_t recv_bytes = static_cast<size_t>(recv_counts[peer]) * size;
        if (send_bytes)
          result = ncclSend(static_cast<const char*>(input.data_ptr()) + sent, send_bytes, ncclUint8, peer, comm_,
                            comm_stream_);
        if (recv_bytes && result == ncclSuccess)
          result = ncclRecv(static_cast<char*>(out.data_ptr()) + received, recv_bytes, ncclUint8, peer, comm_,
                            comm_stream_);
        sent += send_bytes;
        received += recv_bytes;
      }
      const ncclResult_t ended = ncclGroupEnd();
      return result != ncclSuccess ? result : ended;
    });
  }

  std::unique_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t, device_);
    FT_CHECK(root >= 0 && root < world_, "broadcast: root ", root, " is outside [0, ", world_, ")");
    return on_comm_stream("ncclBroadcast", [&] {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype(), "broadcast"), root, comm_, comm_stream_);
    });
  }
  std::unique_ptr<Work> barrier() override {
    // NCCL has no barrier: an all-reduce of one value, then the host waits for it.
    Tensor one = Tensor::zeros({1}, DType::F32, device_);
    all_reduce(one, CommOp::Sum)->wait();
    FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
    return std::make_unique<NcclWork>(recorded_event(cuda::stream()), nullptr);
  }

 private:
  static cudaEvent_t recorded_event(cudaStream_t on) {
    cudaEvent_t e;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(e, on));
    return e;
  }

  void cast_on_comm_stream(const Tensor& from, const Tensor& to) {
    cuda::StreamScope on(comm_stream_);
    runtime::convert_elements(to.data_ptr(), to.dtype(), from.data_ptr(), from.dtype(), from.device(), from.numel());
  }

  /// The collective `launch` enqueues, ordered after the compute stream's work so far. One event
  /// serves every call: the wait is enqueued right after the record, so re-recording it later
  /// cannot change what an earlier wait waited for.
  template <class Launch>
  std::unique_ptr<Work> on_comm_stream(const char* what, Launch&& launch) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    FT_CUDA_CHECK(cudaStreamIsCapturing(cuda::stream(), &capturing));
    if (capturing != cudaStreamCaptureStatusNone) {
      captured_ = true;
    } else if (captured_ && !mixing_support_) {
      // A graph holding this communicator's launches may still run (the training step replays
      // on the compute stream): without mixing support NCCL needs it done first.
      FT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
    }
    FT_CUDA_CHECK(cudaEventRecord(compute_ready_, cuda::stream()));
    FT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
    TimedCollective* timed = nullptr;
    if (timing_) {
      if (timed_next_ == timed_.size()) timed_.push_back(std::make_unique<TimedCollective>());
      timed = timed_[timed_next_++].get();
      timed->label = timing_label();
      timed->waited = false;
      record_timing(timed->start, comm_stream_);
    }
    {
      HostCall call(*this, what);
      FT_NCCL_CHECK(launch(), what);
    }
    if (timed) record_timing(timed->end, comm_stream_);
    watch_for(std::string(what), comm_stream_);
    return std::make_unique<NcclWork>(recorded_event(comm_stream_), timed);
  }

  void begin_timed_region() override {
    timing_ = true;
    timed_next_ = 0;
  }
  void mark_computation_done() override {
    if (!compute_done_) compute_done_ = timing_event();
    record_timing(compute_done_, cuda::stream());
  }
  void end_timed_region() override {
    timing_ = false;
    timed_count_ = timed_next_;
  }

  std::map<std::string, CommTiming> last_timing() override {
    std::map<std::string, CommTiming> by_label;
    if (timed_count_ == 0) return by_label;
    FT_CUDA_CHECK(cudaDeviceSynchronize());
    // Times from the first collective's start. Each one's exposed part is what ran after the
    // computation reached it (its wait, else the end of the computation), when it had started.
    auto since_first = [&](cudaEvent_t e) {
      float ms = 0;
      FT_CUDA_CHECK(cudaEventElapsedTime(&ms, timed_[0]->start, e));
      return static_cast<double>(ms);
    };
    for (size_t i = 0; i < timed_count_; ++i) {
      const TimedCollective& c = *timed_[i];
      CommTiming& t = by_label[c.label];
      const double start = since_first(c.start), end = since_first(c.end);
      ++t.collectives;
      t.busy_ms += end - start;
      if (c.waited || compute_done_) {
        const double reached = since_first(c.waited ? c.reached : compute_done_);
        t.exposed_ms += std::max(0.0, end - std::max(start, reached));
      }
    }
    return by_label;
  }

  // ---- The watchdog ----
  // NCCL's kernels wait for their peers forever. We watch every collective enqueued eagerly (an
  // event recorded after it) and, for steps replayed from a CUDA graph (whose collectives the host
  // never sees), a marker of each step's end on the compute stream. Two threads do it: a poller
  // queries the events and NCCL's asynchronous error, and a monitor, which makes no CUDA or NCCL
  // call, judges the deadlines. A CUDA or NCCL call can block while a peer is gone (seen on an
  // H200 pair: a rank killed during graph replay left the other's CUDA queries hanging), and
  // then only a thread outside both still runs. When a watched item is not done within the
  // timeout, a host call into NCCL has not returned within it, or NCCL reports an error (a peer's
  // connection closed), the monitor ends the process with the error, after ncclCommAbort: the
  // main thread may be blocked in a call that would never return, so an exception could not
  // reach it.
  struct Watched {
    std::string what;
    int64_t step;
    cudaEvent_t done;
    std::chrono::steady_clock::time_point since;
  };

  // Marks the end of the step just enqueued: a replayed graph's collectives are watched through it,
  // before the host waits on the step in any way (a log line, a checkpoint, evaluation).
  void step_enqueued(int64_t step) override {
    watch_for("the collectives of step " + std::to_string(step), cuda::stream(), step);
  }

  /// Watches the work enqueued on `stream` so far (nothing while a graph is being captured: its
  /// events are graph nodes, and the steps' markers cover the replays).
  void watch_for(std::string what, cudaStream_t stream, int64_t step = -1) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    FT_CUDA_CHECK(cudaStreamIsCapturing(cuda::stream(), &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;
    cudaEvent_t done;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(done, stream));
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back({std::move(what), step < 0 ? this->step() : step, done, std::chrono::steady_clock::now()});
  }

  /// Brackets a host call into NCCL (the main thread's enqueueing), which the monitor also times.
  class HostCall {
   public:
    HostCall(NcclCommunicator& comm, const char* what) : comm_(comm) {
      std::lock_guard<std::mutex> lock(comm_.mutex_);
      comm_.host_call_ = Watched{what, comm_.step(), nullptr, std::chrono::steady_clock::now()};
    }
    ~HostCall() {
      std::lock_guard<std::mutex> lock(comm_.mutex_);
      comm_.host_call_.reset();
    }

   private:
    NcclCommunicator& comm_;
  };

  void poll_device() {
    cudaSetDevice(device_.index);
    // Not stopped by the main thread's graph captures: what it queries is never captured.
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&relaxed);
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        const std::string error = "NCCL reported " + std::string(ncclGetErrorString(async)) + " (" +
                                  std::string(ncclGetLastError(comm_)) + ")";
        std::lock_guard<std::mutex> lock(mutex_);
        async_error_ = error;
      }
      // Only this thread pops, so the front's event stays valid while it is queried unlocked.
      for (;;) {
        cudaEvent_t front = nullptr;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (watched_.empty()) break;
          front = watched_.front().done;
        }
        if (cudaEventQuery(front) == cudaErrorNotReady) break;
        cudaEventDestroy(front);
        std::lock_guard<std::mutex> lock(mutex_);
        watched_.pop_front();
      }
    }
  }

  void monitor() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto now = std::chrono::steady_clock::now();
      std::optional<std::pair<Watched, std::string>> failure;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!async_error_.empty())
          failure.emplace(watched_.empty() ? Watched{"a collective", step(), nullptr, {}} : watched_.front(), async_error_);
        else if (!watched_.empty() && now - watched_.front().since > timeout_)
          failure.emplace(watched_.front(),
                          "not done after " + std::to_string(timeout_.count() / 1000.0) + " s (--comm-timeout)");
        else if (host_call_ && now - host_call_->since > timeout_)
          failure.emplace(*host_call_, "the host call did not return after " +
                                           std::to_string(timeout_.count() / 1000.0) + " s (--comm-timeout)");
      }
      if (failure) fail(failure->first, failure->second);
    }
  }

  [[noreturn]] void fail(const Watched& w, const std::string& why) {
    // The rank to blame: the one whose heartbeat stopped (on this machine); then this rank is
    // marked failed, so that the others do not blame it.
    const std::string silent = heartbeat_->silent_ranks();
    heartbeat_->mark_failed();
    const std::string who = silent.empty() ? "a peer rank died or stopped answering (NCCL does not say which, and "
                                             "no heartbeat on this machine stopped)"
                                           : "no answer from " + silent + " (its heartbeat stopped)";
    // The message goes out first: what follows waits on the GPU and on NCCL.
    std::fprintf(stderr, "error: NCCL %s at step %lld failed on rank %d of %d: %s: %s\n", w.what.c_str(),
                 static_cast<long long>(w.step), rank_, world_, why.c_str(), who.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    // ncclCommAbort frees the GPU from the kernels that wait for the peer, but it can itself wait
    // (on a stopped peer's connections, on a replayed graph's queued work): it gets a few seconds.
    std::thread([] {
      std::this_thread::sleep_for(kAbortGrace);
      std::_Exit(1);
    }).detach();
    ncclCommAbort(comm_);
    std::_Exit(1);
  }

  int rank_, world_;
  Device device_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::deque<Watched> watched_;
  std::optional<Watched> host_call_;  // a host call into NCCL under way (HostCall)
  std::string async_error_;           // what NCCL reported, once it did
  std::atomic<bool> stop_{false};
  std::thread poller_, monitor_;
  bool timing_ = false;
  bool mixing_support_ = false;  // NCCL_GRAPH_MIXING_SUPPORT as NCCL reads it
  bool captured_ = false;        // a graph holds launches of this communicator
  // The timed region's collectives, in order (reused each step; their Works point at them).
  std::vector<std::unique_ptr<TimedCollective>> timed_;
  size_t timed_next_ = 0, timed_count_ = 0;
  cudaEvent_t compute_done_ = nullptr;
  std::unique_ptr<Heartbeat> heartbeat_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, Device device, const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(env, device, options);
}

}  // namespace ft
