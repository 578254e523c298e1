#include "lib/flat_layout.h"

#include <algorithm>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

FlatLayout::FlatLayout(const std::vector<Tensor>& tensors, const std::vector<DType>& dtypes) {
  FT_CHECK(tensors.size() == dtypes.size(), "FlatLayout: ", tensors.size(), " tensors but ", dtypes.size(), " dtypes");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "FlatLayout", "tensor");
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.dtype == dtypes[i] && g.device == tensors[i].device();
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{dtypes[i], tensors[i].device(), 0, {}});
    Slot slot{static_cast<size_t>(it - groups_.begin()), it->size, tensors[i].shape()};
    it->size += (slot.numel() + kAlign - 1) / kAlign * kAlign;
    it->members.push_back(i);
    slots_.push_back(std::move(slot));
  }
}

Tensor FlatLayout::allocate(size_t g) const { return allocate(g, groups_.at(g).dtype); }

Tensor FlatLayout::allocate(size_t g, DType dtype) const {
  const Group& group = groups_.at(g);
  Tensor flat = Tensor::empty({group.size}, dtype, group.device);
  runtime::zero_bytes(flat.data_ptr(), group.device, flat.nbytes());
  return flat;
}

Tensor FlatLayout::view(const Tensor& flat, size_t i) const {
  const Slot& s = slots_.at(i);
  FT_CHECK(flat.dim() == 1 && flat.size(0) == groups_.at(s.group).size, "FlatLayout::view: buffer ",
           shape_str(flat.shape()), " is not one of group ", s.group, " (", groups_.at(s.group).size, " elements)");
  return flat.narrow(0, s.offset, s.numel()).reshape(s.shape);
}

std::pair<int64_t, int64_t> FlatLayout::shard(size_t g, int rank, int world) const {
  FT_CHECK(world > 0 && rank >= 0 && rank < world, "FlatLayout::shard: rank ", rank, " of world ", world);
  const int64_t size = groups_.at(g).size;
  const int64_t per_rank = ((size + world - 1) / world + kAlign - 1) / kAlign * kAlign;
  const int64_t begin = std::min(size, per_rank * rank);
  return {begin, std::min(size, begin + per_rank)};
}

}  // namespace ft
