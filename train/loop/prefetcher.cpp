#include "train/loop/prefetcher.h"

#include <algorithm>
#include <map>
#include <string>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

namespace {

using Stream = StreamEvent::Stream;

// One named tensor of a host slot, in page-locked memory that grows and is kept.
struct PinnedBuffer {
  void* data = nullptr;
  size_t capacity = 0;
  Shape shape;
  DType dtype = DType::F32;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { runtime::release_pinned(data); }
  size_t bytes() const { return static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype); }
};

}  // namespace

// A batch the loader writes: page-locked buffers on CUDA, fresh host tensors on the CPU.
struct Prefetcher::HostSlot : BatchWriter {
  bool pinned = false;
  std::map<std::string, PinnedBuffer> buffers;
  std::vector<std::string> names;  // the current batch's tensors (buffers may hold more)
  HostBatchWriter host;
  DataPosition position;  // the source's, after this batch
  StreamEvent copied;     // its last upload to the device is done

  void* buffer(const std::string& name, const Shape& shape, DType dtype) override {
    if (!pinned) return host.buffer(name, shape, dtype);
    PinnedBuffer& b = buffers[name];
    b.shape = shape;
    b.dtype = dtype;
    if (b.bytes() > b.capacity) {
      runtime::release_pinned(b.data);
      b.data = nullptr;
      b.capacity = 0;
      b.data = runtime::allocate_pinned(b.bytes());
      b.capacity = b.bytes();
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    return b.data;
  }
};

// A batch on the device: its tensors are reused while shapes and dtypes stay the same.
struct Prefetcher::DeviceSlot {
  Batch batch;
  DataPosition position;
  StreamEvent uploaded;  // its tensors hold the batch (the compute stream waits for this)
  StreamEvent free;      // the compute work that used the previous batch is done (the copy waits)
};

Prefetcher::Prefetcher(BatchSource& source, Options options)
    : source_(source), options_(options), position_(source.position()) {
  FT_CHECK(options_.depth >= 1, "Prefetcher: depth must be at least 1, got ", options_.depth);
  FT_CHECK(!options_.device.is_cuda() || options_.device_slots >= 2, "Prefetcher: device_slots must be at least 2, got ",
           options_.device_slots);
  for (int64_t i = 0; i < options_.depth; ++i) {
    host_.push_back(std::make_unique<HostSlot>());
    host_.back()->pinned = options_.device.is_cuda();
    free_.push_back(i);
  }
  if (options_.device.is_cuda())
    for (int64_t i = 0; i < options_.device_slots; ++i) {
      device_.push_back(std::make_unique<DeviceSlot>());
      idle_.push_back(i);
    }
  loader_ = std::thread([this] { load(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  loader_.join();
  // Copies still in flight read the host slots and write the device slots: both outlive them.
  try {
    for (const auto& d : device_) d->uploaded.synchronize();
    for (const auto& h : host_) h->copied.synchronize();
  } catch (const Error&) {
    // A device error here was or will be reported by the training thread's own reads.
  }
}

void Prefetcher::load() {
  for (;;) {
    int64_t s = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || !free_.empty(); });
      if (stop_) return;
      s = free_.front();
      free_.pop_front();
    }
    HostSlot& slot = *host_[static_cast<size_t>(s)];
    try {
      slot.copied.synchronize();  // the upload of the batch it held has read it
      slot.names.clear();
      source_.next_into(slot);
      slot.position = source_.position();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(s);
    }
    changed_.notify_all();
  }
}

int64_t Prefetcher::take_ready() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (!ready_.empty()) {
    const int64_t s = ready_.front();
    ready_.pop_front();
    return s;
  }
  try {
    std::rethrow_exception(error_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    FT_FAIL("data loader: ", e.what());
  } catch (...) {
    FT_FAIL("data loader: the batch source threw an unknown exception");
  }
}

void Prefetcher::give_back(int64_t slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }
  changed_.notify_all();
}

void Prefetcher::upload_next() {
  FT_CHECK(!idle_.empty(), "Prefetcher: all ", options_.device_slots,
           " device slots hold batches in use or uploaded ahead; release() the used ones first");
  const int64_t s = take_ready();
  const int64_t d = idle_.front();
  idle_.pop_front();
  HostSlot& host = *host_[static_cast<size_t>(s)];
  DeviceSlot& dev = *device_[static_cast<size_t>(d)];
  Batch batch;
  bool allocated = false;
  for (const std::string& name : host.names) {
    const PinnedBuffer& b = host.buffers.at(name);
    Tensor t;
    if (dev.batch.contains(name) && dev.batch.at(name).shape() == b.shape && dev.batch.at(name).dtype() == b.dtype) {
      t = dev.batch.at(name);
    } else {
      t = Tensor::empty(b.shape, b.dtype, options_.device);
      allocated = true;
    }
    batch.set(name, t);
  }
  dev.batch = std::move(batch);
  // New tensors come from the compute stream's pool: the copy stream writes them after that.
  if (allocated) dev.free.record(Stream::Compute);
  dev.free.wait(Stream::Copy);
  for (const std::string& name : host.names)
    runtime::copy_to_device_async(dev.batch.at(name).data_ptr(), host.buffers.at(name).data,
                                  host.buffers.at(name).bytes());
  dev.uploaded.record(Stream::Copy);
  host.copied.record(Stream::Copy);
  dev.position = host.position;
  give_back(s);
  staged_.push_back(d);
}

Batch Prefetcher::next() {
  if (!options_.device.is_cuda()) {
    const int64_t s = take_ready();
    HostSlot& slot = *host_[static_cast<size_t>(s)];
    Batch batch = slot.host.take();
    position_ = slot.position;
    give_back(s);
    return batch;
  }
  if (staged_.empty()) upload_next();
  const int64_t d = staged_.front();
  staged_.pop_front();
  DeviceSlot& dev = *device_[static_cast<size_t>(d)];
  dev.uploaded.wait(Stream::Compute);
  in_use_.push_back(d);
  position_ = dev.position;
  return dev.batch;
}

void Prefetcher::release() {
  for (const int64_t d : in_use_) {
    device_[static_cast<size_t>(d)]->free.record(Stream::Compute);
    idle_.push_back(d);
  }
  in_use_.clear();
}

void Prefetcher::upload_ahead(int64_t count) {
  if (!options_.device.is_cuda()) return;
  while (static_cast<int64_t>(staged_.size()) < count) upload_next();
}

}  // namespace ft
