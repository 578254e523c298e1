// Tensor: a typed, shaped view of contiguous storage on one device, with autograd metadata.
//
// Storage is always contiguous; views (reshape, narrow of the leading dimension) share it and
// cost nothing. Ops that would need strides (transpose, narrow of an inner dimension) copy.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lib/dtype.h"

namespace ft {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  bool owned = true;
  Storage(size_t bytes, Device device);
  /// Lent memory, never released here: `data` (null until then) is pointed at memory its lender
  /// keeps alive, and moved by it (ZeRO-3's parameters live in whichever buffer holds them gathered).
  Storage(size_t bytes, Device device, void* lent) : data(lent), bytes(bytes), device(device), owned(false) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct Node;
struct TensorImpl;

/// A deterministic source of random numbers: Philox keyed on seed, advanced by an offset.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  /// Reserves `count` counter values and returns the first.
  uint64_t advance(uint64_t count) {
    uint64_t first = offset_;
    offset_ += (count + 3) / 4 * 4;
    return first;
  }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = kCPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = kCPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = kCPU);
  /// 0, 1, ..., n-1.
  static Tensor arange(int64_t n, DType dtype = DType::I64, Device device = kCPU);
  /// Uniform in [0, 1), drawn with Philox from the generator (same bits on every device).
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32, Device device = kCPU);
  /// Standard normal (Box-Muller on Philox uniforms); identical values on every device.
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32, Device device = kCPU);
  /// N(0, std²): bit for bit randn(shape, gen, dtype, device) * std, without the second pass.
  static Tensor normal(const Shape& shape, Generator& gen, double std, DType dtype = DType::F32,
                       Device device = kCPU);
  /// Copies host values (converted to dtype) into a new tensor.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32,
                            Device device = kCPU);

  // ---- properties
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  /// Size of dimension d; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  void* data_ptr() const;
  template <class T>
  T* data() const { return static_cast<T*>(data_ptr()); }
  /// True when both tensors view the same storage.
  bool shares_storage(const Tensor& other) const;

  // ---- conversion and reading (synchronizing when they read a device)
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  /// The single element as a double.
  double item() const;
  /// All elements as doubles, in order.
  std::vector<double> to_vector() const;
  std::string str(int64_t max_per_dim = 6) const;

  // ---- views
  Tensor reshape(const Shape& shape) const;
  /// Elements [start, start + length) of dimension d. A view when every outer dimension is 1
  /// or d is the leading dimension; otherwise a copy.
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  /// Swaps the last two dimensions (a copy).
  Tensor transpose() const;

  // ---- autograd
  Tensor& requires_grad_(bool on = true);
  bool requires_grad() const;
  /// The accumulated gradient of a leaf, or an undefined tensor before any backward. A leaf
  /// attached to a GradBuffer always has one: its view of the flat buffer (f32 on CUDA), zeroed
  /// here first (a memset) when it is still stale from the last zero_grad.
  Tensor grad() const;
  /// Replaces the gradient; a leaf with a gradient view gets the values copied into the view
  /// (zeros for an undefined grad).
  void set_grad(const Tensor& grad) const;
  /// Drops the gradient, or zeroes the view of a leaf attached to a GradBuffer.
  void zero_grad() const;
  /// Runs backward from this tensor. A scalar needs no gradient; others need one of their shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// The same data without history.
  Tensor detach() const;
  const std::shared_ptr<Node>& grad_fn() const;

  // ---- in-place (no autograd; for optimizers and loaders)
  /// Copies src's values (same shape; any device; dtype converted) into this tensor.
  void copy_(const Tensor& src) const;
  /// Makes this tensor use src's storage (same shape and dtype), dropping its own.
  void assign_(const Tensor& src) const;
  /// Sets every element to value, in place (on CUDA a fill kernel: no allocation, no sync).
  void fill_(double value) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t byte_offset = 0;
  Shape shape;
  DType dtype = DType::F32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // set on results of differentiable ops
  Tensor grad;                    // accumulated gradient of a leaf
  // A leaf attached to a GradBuffer: `grad` is its persistent view of the flat buffer, and
  // backward adds into it in place instead of replacing it.
  bool grad_is_view = false;
  // The view is logically zero: nothing was added since the buffer was zeroed, so the next
  // contribution may be written instead of added (a host flag that follows stream order).
  bool grad_zeroed = false;
  // ... and its memory still holds an earlier step's values: GradBuffer::zero enqueues no
  // kernel, since the first contribution overwrites the view whole; a reader (grad(), the
  // optimizer) or a sparse contribution clears it first.
  bool grad_stale = false;
  // Called once per backward, after the leaf's last gradient contribution (autograd.h), each
  // with the id add_grad_ready_hook returned for it.
  std::vector<std::pair<uint64_t, std::function<void()>>> grad_ready_hooks;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

/// Throws ft::Error unless t is defined.
void check_defined(const Tensor& t, const char* op, const char* name);

}  // namespace ft
