#include "train/dist/nccl_communicator.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lib/cuda/runtime.h"
#include "lib/error.h"
#include "train/dist/heartbeat.h"

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

/// The compute stream waits for this event: recorded on the communication stream after the
/// collective.
class NcclWork : public Work {
 public:
  explicit NcclWork(cudaEvent_t done) : done_(done) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  void wait() override { FT_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), done_, 0)); }

 private:
  cudaEvent_t done_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, Device device, const CommOptions& options)
      : rank_(env.rank), world_(env.world_size), device_(device), timeout_(options.timeout) {
    if (!std::getenv("NCCL_COMM_ID")) {
      const std::string id = env.master_addr + ":" + std::to_string(env.master_port);
      ::setenv("NCCL_COMM_ID", id.c_str(), 0);
    }
    ncclUniqueId id;
    FT_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    {
      // ncclCommInitRank waits for every rank, forever: one that never starts ends this process
      // with the error after the timeout (there is no communicator to abort yet).
      std::mutex mutex;
      std::condition_variable joined;
      bool done = false;
      std::thread guard([&] {
        std::unique_lock<std::mutex> lock(mutex);
        if (joined.wait_for(lock, timeout_, [&] { return done; })) return;
        std::fprintf(stderr,
                     "error: NCCL: rank %d of %d could not join the run at %s within %.1f s (--comm-timeout): "
                     "another rank did not start or cannot reach it\n",
                     rank_, world_, std::getenv("NCCL_COMM_ID"), timeout_.count() / 1000.0);
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
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    heartbeat_ = std::make_unique<Heartbeat>(rendezvous_folder(options.store_dir, env.run_id), rank_, world_,
                                             /*blame_missing=*/false);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    for (const Watched& w : watched_) cudaEventDestroy(w.done);
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
    return std::make_unique<NcclWork>(recorded_event(cuda::stream()));
  }

 private:
  static cudaEvent_t recorded_event(cudaStream_t on) {
    cudaEvent_t e;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(e, on));
    return e;
  }

  /// The collective `launch` enqueues, ordered after the compute stream's work so far. One event
  /// serves every call: the wait is enqueued right after the record, so re-recording it later
  /// cannot change what an earlier wait waited for.
  template <class Launch>
  std::unique_ptr<Work> on_comm_stream(const char* what, Launch&& launch) {
    FT_CUDA_CHECK(cudaEventRecord(compute_ready_, cuda::stream()));
    FT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
    FT_NCCL_CHECK(launch(), what);
    watch_for(std::string(what), comm_stream_);
    return std::make_unique<NcclWork>(recorded_event(comm_stream_));
  }

  // ---- The watchdog ----
  // NCCL's kernels wait for their peers forever. A thread of ours watches every collective
  // enqueued eagerly (an event recorded after it) and, for steps replayed from a CUDA graph (whose
  // collectives the host never sees), a marker of each step's end on the compute stream. When one
  // is not done within the timeout, or NCCL reports an asynchronous error (a peer's connection
  // closed), the communicator is aborted (ncclCommAbort, which frees the GPU from the waiting
  // kernels) and the process ends with the error: the main thread may be blocked in a CUDA call
  // that would never return, so an exception could not reach it.
  struct Watched {
    std::string what;
    int64_t step;
    cudaEvent_t done;
    std::chrono::steady_clock::time_point since;
  };

  void step_started(int64_t step) override {
    if (step > 1) watch_for("the collectives of step " + std::to_string(step - 1), cuda::stream(), step - 1);
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

  void watch() {
    cudaSetDevice(device_.index);
    // Not stopped by the main thread's graph captures: what it queries is never captured.
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&relaxed);
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        fail(oldest(), "NCCL reported " + std::string(ncclGetErrorString(async)) + " (" +
                           std::string(ncclGetLastError(comm_)) + ")");
      std::lock_guard<std::mutex> lock(mutex_);
      while (!watched_.empty()) {
        const Watched& w = watched_.front();
        const cudaError_t state = cudaEventQuery(w.done);
        if (state == cudaErrorNotReady) {
          if (std::chrono::steady_clock::now() - w.since > timeout_)
            fail(w, "not done after " + std::to_string(timeout_.count() / 1000.0) + " s (--comm-timeout)");
          break;
        }
        cudaEventDestroy(w.done);
        watched_.pop_front();
      }
    }
  }

  Watched oldest() {
    std::lock_guard<std::mutex> lock(mutex_);
    return watched_.empty() ? Watched{"a collective", step(), nullptr, {}} : watched_.front();
  }

  [[noreturn]] void fail(const Watched& w, const std::string& why) {
    // The rank to blame: the one whose heartbeat stopped (on this machine); then this rank is
    // marked failed, so that the others do not blame it.
    const std::string silent = heartbeat_->silent_ranks();
    heartbeat_->mark_failed();
    ncclCommAbort(comm_);
    const std::string who = silent.empty() ? "a peer rank died or stopped answering (NCCL does not say which, and "
                                             "no heartbeat on this machine stopped)"
                                           : "no answer from " + silent + " (its heartbeat stopped)";
    std::fprintf(stderr, "error: NCCL %s at step %lld failed on rank %d of %d: %s: %s\n", w.what.c_str(),
                 static_cast<long long>(w.step), rank_, world_, why.c_str(), who.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(1);
  }

  int rank_, world_;
  Device device_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::deque<Watched> watched_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
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
