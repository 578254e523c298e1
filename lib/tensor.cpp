#include "lib/tensor.h"

#include <cmath>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "lib/autograd.h"
#include "lib/cpu_dispatch.h"
#include "lib/error.h"
#include "lib/runtime.h"
#include "lib/runtime/elements.h"

namespace ft {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Storage::Storage(size_t bytes_, Device device_) : bytes(bytes_), device(device_) {
  data = runtime::allocate(bytes, device);
}
Storage::~Storage() {
  if (owned) runtime::release(data, device);
}

void check_defined(const Tensor& t, const char* op, const char* name) {
  FT_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
}

// ---- creation

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) FT_CHECK(d >= 0, "empty: negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  } catch (const OutOfMemory& e) {  // the allocator knows the bytes; the tensor is named here
    throw OutOfMemory(detail::concat("a ", dtype_name(dtype), " ", shape_str(shape), " tensor on ", device.str(), ": ",
                                     e.what()));
  }
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

void Tensor::fill_(double value) const {
  check_defined(*this, "fill_", "tensor");
  runtime::fill_elements(data_ptr(), dtype(), device(), numel(), value);
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  Tensor t = empty({n}, dtype, device);
  runtime::arange_elements(t.data_ptr(), dtype, device, n);
  return t;
}




Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  FT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values for shape ", shape_str(shape));
  Tensor host = empty(shape, dtype, kCPU);
  cpu::dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i) cpu::store(p, static_cast<int64_t>(i), values[i]);
  });
  return host.to(device);
}

// ---- properties

const Shape& Tensor::shape() const {
  FT_CHECK(impl_, "shape() of an undefined tensor");
  return impl_->shape;
}
int64_t Tensor::size(int64_t d) const {
  int64_t nd = dim();
  int64_t k = d < 0 ? d + nd : d;
  FT_CHECK(k >= 0 && k < nd, "size(", d, ") of a tensor of shape ", shape_str(shape()));
  return shape()[static_cast<size_t>(k)];
}
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const {
  FT_CHECK(impl_, "dtype() of an undefined tensor");
  return impl_->dtype;
}
Device Tensor::device() const {
  FT_CHECK(impl_, "device() of an undefined tensor");
  return impl_->storage->device;
}
void* Tensor::data_ptr() const {
  FT_CHECK(impl_, "data of an undefined tensor");
  // Lent storage without data: a ZeRO-3 parameter read while its layer is not gathered.
  FT_CHECK(impl_->storage->data || impl_->storage->bytes == 0, "data of a tensor whose storage is not there: a ZeRO-3 ",
           "parameter outside its layer's gathering (read the whole model inside a WholeParameters scope)");
  return static_cast<char*>(impl_->storage->data) + impl_->byte_offset;
}
bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

// ---- conversion

Tensor Tensor::to(Device target) const {
  check_defined(*this, "to", "tensor");
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  runtime::copy_bytes(out.data_ptr(), target, data_ptr(), device(), nbytes());
  // Device moves keep the graph, so a model can be built on the CPU and moved before training.
  return record("to_device", out, {*this}, [source = device()](const Tensor& g) {
    return std::vector<Tensor>{g.to(source)};
  });
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = to(kCPU);
  std::vector<double> values(static_cast<size_t>(numel()));
  cpu::dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(cpu::load(p, static_cast<int64_t>(i)));
  });
  return values;
}

double Tensor::item() const {
  FT_CHECK(defined() && numel() == 1, "item: expected one element, got shape ",
           defined() ? shape_str(shape()) : "undefined");
  return to_vector()[0];
}

std::string Tensor::str(int64_t max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream out;
  std::vector<double> v = to_vector();
  out << "Tensor(" << dtype_name(dtype()) << ", " << device().str() << ", shape=" << shape_str(shape());
  if (requires_grad()) out << ", requires_grad";
  out << ")\n";
  out << std::setprecision(5);
  // Prints the last dim of each leading index, eliding the middle of long dims.
  const int64_t cols = dim() == 0 ? 1 : size(-1);
  const int64_t rows = cols == 0 ? 0 : numel() / cols;
  auto print_row = [&](int64_t r) {
    out << "  [";
    for (int64_t c = 0; c < cols; ++c) {
      if (cols > 2 * max_per_dim && c == max_per_dim) {
        out << "..., ";
        c = cols - max_per_dim;
      }
      out << v[static_cast<size_t>(r * cols + c)] << (c + 1 < cols ? ", " : "");
    }
    out << "]\n";
  };
  for (int64_t r = 0; r < rows; ++r) {
    if (rows > 2 * max_per_dim && r == max_per_dim) {
      out << "  ...\n";
      r = rows - max_per_dim;
    }
    print_row(r);
  }
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

// ---- autograd

Tensor& Tensor::requires_grad_(bool on) {
  check_defined(*this, "requires_grad_", "tensor");
  FT_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ",
           dtype_name(dtype()));
  FT_CHECK(!impl_->grad_fn, "requires_grad_: only leaf tensors can change requires_grad");
  impl_->requires_grad = on;
  return *this;
}
bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
Tensor Tensor::grad() const {
  check_defined(*this, "grad", "tensor");
  if (impl_->grad_stale) {
    runtime::zero_bytes(impl_->grad.data_ptr(), impl_->grad.device(), impl_->grad.nbytes());
    impl_->grad_stale = false;
  }
  return impl_->grad;
}
void Tensor::set_grad(const Tensor& grad) const {
  check_defined(*this, "set_grad", "tensor");
  FT_CHECK(!grad.defined() || grad.shape() == shape(), "set_grad: gradient shape ", shape_str(grad.shape()),
           " for a tensor of shape ", shape_str(shape()));
  if (!impl_->grad_is_view) {
    impl_->grad = grad;
    return;
  }
  if (grad.defined()) impl_->grad.copy_(grad);
  else impl_->grad.fill_(0.0);
  impl_->grad_zeroed = !grad.defined();
  impl_->grad_stale = false;
}
void Tensor::zero_grad() const {
  check_defined(*this, "zero_grad", "tensor");
  if (!impl_->grad_is_view) {
    impl_->grad = Tensor();
    return;
  }
  impl_->grad.fill_(0.0);
  impl_->grad_zeroed = true;
  impl_->grad_stale = false;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_ ? impl_->grad_fn : none;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  check_defined(*this, "backward", "tensor");
  FT_CHECK(requires_grad(), "backward: the tensor does not require grad");
  run_backward(*this, seed_gradient(*this, grad, "backward"), retain_graph);
}

Tensor Tensor::detach() const {
  check_defined(*this, "detach", "tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->byte_offset = impl_->byte_offset;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::copy_(const Tensor& src) const {
  check_defined(*this, "copy_", "destination");
  check_defined(src, "copy_", "source");
  FT_CHECK(src.numel() == numel(), "copy_: source of shape ", shape_str(src.shape()), " into shape ",
           shape_str(shape()));
  Tensor converted = src;
  if (src.dtype() != dtype()) {  // converted where the source lives, then moved
    converted = empty(src.shape(), dtype(), src.device());
    runtime::convert_elements(converted.data_ptr(), dtype(), src.data_ptr(), src.dtype(), src.device(), src.numel());
  }
  runtime::copy_bytes(data_ptr(), device(), converted.data_ptr(), converted.device(), nbytes());
}

void Tensor::assign_(const Tensor& src) const {
  check_defined(*this, "assign_", "destination");
  FT_CHECK(src.shape() == shape() && src.dtype() == dtype() && src.device() == device(),
           "assign_: source ", shape_str(src.shape()), " ", dtype_name(src.dtype()), " ", src.device().str(),
           " must match ", shape_str(shape()), " ", dtype_name(dtype()), " ", device().str());
  impl_->storage = src.impl_->storage;
  impl_->byte_offset = src.impl_->byte_offset;
}

}  // namespace ft
