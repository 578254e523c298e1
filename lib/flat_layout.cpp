#include "lib/flat_layout.h"

#include <algorithm>
#include <iterator>

#include "lib/error.h"
#include "lib/runtime.h"

namespace ft {

FlatLayout::FlatLayout(const std::vector<Tensor>& tensors, const std::vector<DType>& dtypes, int64_t group_multiple,
                       const std::vector<int>& units) {
  FT_CHECK(tensors.size() == dtypes.size(), "FlatLayout: ", tensors.size(), " tensors but ", dtypes.size(), " dtypes");
  FT_CHECK(units.empty() || units.size() == tensors.size(), "FlatLayout: ", tensors.size(), " tensors but ",
           units.size(), " units");
  FT_CHECK(group_multiple > 0 && group_multiple % kAlign == 0, "FlatLayout: group_multiple ", group_multiple,
           " is not a positive multiple of ", kAlign);
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "FlatLayout", "tensor");
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.dtype == dtypes[i] && g.device == tensors[i].device();
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{dtypes[i], tensors[i].device(), 0, {}});
    const int unit = units.empty() ? -1 : units[i];
    if (!it->members.empty() && slots_[it->members.back()].unit != unit)
      it->size = (it->size + group_multiple - 1) / group_multiple * group_multiple;
    Slot slot{static_cast<size_t>(it - groups_.begin()), it->size, tensors[i].shape(), unit};
    it->size += (slot.numel() + kAlign - 1) / kAlign * kAlign;
    it->members.push_back(i);
    slots_.push_back(std::move(slot));
  }
  for (Group& g : groups_) g.size = (g.size + group_multiple - 1) / group_multiple * group_multiple;
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

std::pair<int64_t, int64_t> FlatLayout::Bucket::chunk(int rank, int world) const {
  FT_CHECK(world > 0 && rank >= 0 && rank < world, "FlatLayout::Bucket::chunk: rank ", rank, " of world ", world);
  const int64_t part = size() / world;
  return {begin + part * rank, begin + part * (rank + 1)};
}

std::vector<FlatLayout::Bucket> FlatLayout::buckets(int64_t max_elements, int world) const {
  FT_CHECK(world > 0, "FlatLayout::buckets: world size ", world);
  const int64_t unit = kAlign * world;
  const int64_t cap = std::max(unit, max_elements / unit * unit);
  std::vector<Bucket> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    FT_CHECK(group.size % unit == 0, "FlatLayout::buckets: group ", g, " holds ", group.size,
             " elements, not a multiple of ", unit, " (build the layout with group_multiple ", unit, ")");
    // Where each unit's run of tensors starts: no bucket crosses one.
    std::vector<int64_t> unit_starts{0};
    for (size_t k = 1; k < group.members.size(); ++k)
      if (slots_[group.members[k]].unit != slots_[group.members[k - 1]].unit)
        unit_starts.push_back(slots_[group.members[k]].offset);
    for (int64_t end = group.size; end > 0;) {
      const int64_t floor = *std::prev(std::lower_bound(unit_starts.begin(), unit_starts.end(), end));
      Bucket b{g, std::max<int64_t>(floor, end - cap), end, {}};
      for (size_t i : group.members) {
        const Slot& s = slots_[i];
        if (s.offset < b.end && s.offset + s.numel() > b.begin) {
          b.members.push_back(i);
          b.unit = s.unit;
        }
      }
      end = b.begin;
      out.push_back(std::move(b));
    }
  }
  return out;
}

}  // namespace ft
