#include "lib/grad_buffer.h"

#include <algorithm>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

DType GradBuffer::grad_dtype(const Tensor& param) { return param.dtype() == DType::F64 ? DType::F64 : DType::F32; }

GradBuffer::GradBuffer(const std::vector<Tensor>& leaves, int64_t group_multiple, bool storage,
                       const std::vector<int>& units)
    : leaves_(leaves), storage_(storage) {
  std::vector<DType> dtypes;
  for (const Tensor& leaf : leaves_) {
    check_defined(leaf, "GradBuffer", "leaf");
    FT_CHECK(leaf.requires_grad() && !leaf.grad_fn(), "GradBuffer: every tensor must be a leaf that requires grad");
    FT_CHECK(is_floating(leaf.dtype()), "GradBuffer: a leaf of dtype ", dtype_name(leaf.dtype()));
    dtypes.push_back(grad_dtype(leaf));
  }
  layout_ = FlatLayout(leaves_, dtypes, group_multiple, units);
  if (!storage_) {
    for (const Tensor& leaf : leaves_) {
      FT_CHECK(!leaf.impl()->grad_is_view, "GradBuffer: the tensor already has a gradient view (one GradBuffer, "
               "i.e. one optimizer, per parameter)");
      leaf.zero_grad();
    }
    return;
  }
  for (size_t g = 0; g < layout_.groups().size(); ++g) flats_.push_back(layout_.allocate(g));
  for (size_t i = 0; i < leaves_.size(); ++i) {
    attach_grad_view(leaves_[i], layout_.view(flats_[layout_.slot(i).group], i));
  }
}

GradBuffer::~GradBuffer() {
  for (const Tensor& leaf : leaves_) detach_grad_view(leaf);
}

void GradBuffer::zero() {
  for (const Tensor& leaf : leaves_) {
    if (storage_) leaf.impl()->grad_zeroed = leaf.impl()->grad_stale = true;
    else leaf.zero_grad();
  }
}

void GradBuffer::materialize() const {
  if (!storage_) return;
  for (size_t g = 0; g < flats_.size(); ++g) {
    const std::vector<size_t>& members = layout_.groups()[g].members;
    const bool all_stale = std::all_of(members.begin(), members.end(), [&](size_t i) { return leaves_[i].impl()->grad_stale; });
    if (all_stale) {  // one memset for the whole buffer rather than one per view
      runtime::zero_bytes(flats_[g].data_ptr(), flats_[g].device(), flats_[g].nbytes());
      for (size_t i : members) leaves_[i].impl()->grad_stale = false;
      continue;
    }
    for (size_t i : members) (void)leaves_[i].grad();  // zeroes a stale view
  }
}

const Tensor& GradBuffer::flat(size_t g) const {
  materialize();
  return storage(g);
}

const std::vector<Tensor>& GradBuffer::flats() const {
  FT_CHECK(storage_, "GradBuffer: the flat gradient buffers were not allocated (ZeRO-2 keeps shards only)");
  materialize();
  return flats_;
}

const Tensor& GradBuffer::storage(size_t g) const {
  FT_CHECK(storage_, "GradBuffer: the flat gradient buffers were not allocated (ZeRO-2 keeps shards only)");
  return flats_.at(g);
}

}  // namespace ft
