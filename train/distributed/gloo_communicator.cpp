#include "train/distributed/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "lib/error.h"
#include "lib/parse.h"
#include "train/distributed/heartbeat.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

class GlooWork : public Work {
 public:
  explicit GlooWork(std::future<void> done) : done_(std::move(done)) {}
  void wait() override {
    if (done_.valid()) done_.get();  // rethrows the collective's ft::Error
  }

 private:
  std::future<void> done_;
};

template <class F>
void with_gloo_type(DType dtype, const char* collective, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I64: return f(int64_t{});
    default: FT_FAIL(collective, ": Gloo reduces f32, f64 and i64 tensors, got ", dtype_name(dtype));
  }
}

template <class T>
void divide(T* data, size_t n, int world) {
  for (size_t i = 0; i < n; ++i) data[i] /= static_cast<T>(world);
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const LaunchEnv& env, const CommOptions& options)
      : rank_(env.rank), world_(env.world_size), timeout_(options.timeout) {
    const std::string prefix = "ft-" + env.run_id;
    std::string redis = options.redis.empty() && std::getenv("FT_REDIS") ? std::getenv("FT_REDIS") : options.redis;
    std::shared_ptr<gloo::rendezvous::Store> store;
    fs::path folder, store_folder;
    if (!redis.empty()) {
      const size_t colon = redis.rfind(':');
      FT_CHECK(colon != std::string::npos, "Gloo: the Redis address must be host:port, got '", redis, "'");
      store = std::make_shared<gloo::rendezvous::RedisStore>(redis.substr(0, colon), static_cast<int>(parse_int64(redis.substr(colon + 1), "FT_REDIS's port")));
    } else {
      folder = rendezvous_folder(options.store_dir, env.run_id);
      store_folder = folder / "store";  // its own folder, removed once every rank has joined
      std::error_code ec;
      fs::create_directories(store_folder, ec);
      FT_CHECK(!ec, "Gloo: cannot create the rendezvous folder '", store_folder.string(), "': ", ec.message());
      store = std::make_shared<gloo::rendezvous::FileStore>(store_folder.string());
    }
    gloo::transport::tcp::attr attr;
    // One host (the launcher's MASTER_ADDR is this machine): loopback. Several: this host's name.
    const bool local = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
    attr.hostname = std::getenv("FT_GLOO_HOSTNAME") ? std::getenv("FT_GLOO_HOSTNAME") : (local ? "127.0.0.1" : "");
    try {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      context->setTimeout(timeout_);
      gloo::rendezvous::PrefixStore prefixed(prefix, *store);
      context->connectFullMesh(prefixed, device);
      context_ = context;
      // Every rank has read every key once all are past this barrier: rank 0 removes the
      // store's files, so a finished run leaves only the heartbeats (gone at a clean exit).
      if (!store_folder.empty()) {
        gloo::BarrierOptions joined(context_);
        joined.setTimeout(timeout_);
        gloo::barrier(joined);
        std::error_code ec;
        if (rank_ == 0) fs::remove_all(store_folder, ec);
      }
    } catch (const gloo::Exception& e) {
      FT_FAIL("Gloo: rank ", rank_, " of ", world_, " could not join the run '", env.run_id, "' within ",
              timeout_.count(), " ms (", e.what(), ")");
    } catch (const std::exception& e) {  // gloo::EnforceNotMet: the store's own checks
      const bool stale = std::string(e.what()).find("already exists") != std::string::npos;
      FT_FAIL("Gloo: rank ", rank_, " of ", world_, " could not join the run '", env.run_id, "' (", e.what(), ")",
              stale ? ": a run with the same id left its rendezvous files in '" + folder.string() +
                          "'; remove that folder, or give this run its own FT_RUN_ID"
                    : std::string());
    }
    heartbeat_ = std::make_unique<Heartbeat>(folder, rank_, world_, /*blame_missing=*/true);
    worker_ = std::thread([this] { work_loop(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "gloo"; }

  std::unique_ptr<Work> all_reduce(const Tensor& t, CommOp op) override {
    check_tensor("all_reduce", t, kCPU);
    return enqueue("all_reduce", t.nbytes(), [this, t, op](uint32_t tag) {
      with_gloo_type(t.dtype(), "all_reduce", [&](auto tag_type) {
        using T = decltype(tag_type);
        reduce_in_place(t.data<T>(), static_cast<size_t>(t.numel()), tag);
        if (op == CommOp::Average) divide(t.data<T>(), static_cast<size_t>(t.numel()), world_);
      });
    });
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& out, CommOp op) override {
    check_parts("reduce_scatter", input, out, kCPU);
    return enqueue("reduce_scatter", input.nbytes(), [this, input, out, op](uint32_t tag) {
      with_gloo_type(input.dtype(), "reduce_scatter", [&](auto tag_type) {
        using T = decltype(tag_type);
        const size_t n = static_cast<size_t>(out.numel());
        std::vector<T> all(input.data<T>(), input.data<T>() + input.numel());
        reduce_in_place(all.data(), all.size(), tag);
        std::memcpy(out.data<T>(), all.data() + static_cast<size_t>(rank_) * n, n * sizeof(T));
        if (op == CommOp::Average) divide(out.data<T>(), n, world_);
      });
    });
  }

  std::unique_ptr<Work> all_gather(const Tensor& input, const Tensor& out) override {
    check_parts("all_gather", out, input, kCPU);
    return enqueue("all_gather", out.nbytes(), [this, input, out](uint32_t tag) {
      gloo::AllgatherOptions opts(context_);
      // In place (the input is this rank's slot of the output, as ZeRO-1 gathers): Gloo copies the
      // input into that slot, so it gets a copy of its own to read from.
      const auto* in = static_cast<const uint8_t*>(input.data_ptr());
      std::vector<uint8_t> own;
      if (in == static_cast<const uint8_t*>(out.data_ptr()) + static_cast<size_t>(rank_) * input.nbytes()) {
        own.assign(in, in + input.nbytes());
        in = own.data();
      }
      opts.setInput(const_cast<uint8_t*>(in), input.nbytes());
      opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), out.nbytes());
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  std::unique_ptr<Work> all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& out,
                                   const std::vector<int64_t>& recv_counts) override {
    check_exchange(input, send_counts, out, recv_counts, kCPU);
    return enqueue("all_to_all", input.nbytes(), [this, input, out, send_counts, recv_counts](uint32_t tag) {
      // In bytes, so that every dtype goes; an empty side points at a byte of its own (Gloo
      // wants a buffer even for nothing).
      const int64_t size = static_cast<int64_t>(dtype_size(input.dtype()));
      std::vector<int64_t> send_bytes, recv_bytes;
      for (int64_t c : send_counts) send_bytes.push_back(c * size);
      for (int64_t c : recv_counts) recv_bytes.push_back(c * size);
      uint8_t nothing_in = 0, nothing_out = 0;
      auto* in = input.numel() ? static_cast<uint8_t*>(input.data_ptr()) : &nothing_in;
      auto* to = out.numel() ? static_cast<uint8_t*>(out.data_ptr()) : &nothing_out;
      gloo::AlltoallvOptions opts(context_);
      opts.setInput(in, send_bytes);
      opts.setOutput(to, recv_bytes);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::alltoallv(opts);
    });
  }

  std::unique_ptr<Work> broadcast(const Tensor& t, int root) override {
    check_tensor("broadcast", t, kCPU);
    FT_CHECK(root >= 0 && root < world_, "broadcast: root ", root, " is outside [0, ", world_, ")");
    return enqueue("broadcast", t.nbytes(), [this, t, root](uint32_t tag) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), t.nbytes());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  std::unique_ptr<Work> barrier() override {
    return enqueue("barrier", 0, [this](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  struct Task {
    std::string what;
    int64_t step;
    size_t bytes;
    std::function<void(uint32_t)> run;
    std::promise<void> done;
  };

  template <class T>
  void reduce_in_place(T* data, size_t n, uint32_t tag) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, n);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }

  std::unique_ptr<Work> enqueue(const char* what, size_t bytes, std::function<void(uint32_t)> run) {
    Task task{what, step(), bytes, std::move(run), {}};
    auto work = std::make_unique<GlooWork>(task.done.get_future());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_all();
    return work;
  }

  void work_loop() {
    uint32_t tag = 0;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        if (failed_.empty()) task.run(tag++);
        else throw Error(failed_);
        task.done.set_value();
      } catch (const gloo::Exception& e) {
        // Name the ranks that stopped answering before the message, which Gloo words in sockets.
        const std::string stale = heartbeat_->silent_ranks();
        heartbeat_->mark_failed();
        failed_ = "Gloo " + task.what + " (" + std::to_string(task.bytes) + " bytes) at step " +
                  std::to_string(task.step) + " failed on rank " + std::to_string(rank_) + " of " +
                  std::to_string(world_) + ": " +
                  (stale.empty() ? std::string("a peer closed its connection or did not answer")
                                 : "no answer from " + stale + " (its heartbeat stopped)") +
                  " within the timeout of " + std::to_string(timeout_.count()) + " ms [" + e.what() + "]";
        task.done.set_exception(std::make_exception_ptr(Error(failed_)));
      } catch (...) {
        task.done.set_exception(std::current_exception());
      }
    }
  }

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::string failed_;  // after a failure every later collective fails with the same message
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, const CommOptions& options) {
  return std::make_unique<GlooCommunicator>(env, options);
}

}  // namespace ft
