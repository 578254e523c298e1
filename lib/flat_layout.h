// Flat storage for a list of tensors: where each one sits in one 1-D buffer per group.
//
// The gradients (GradBuffer), the optimizers' master weights and moments, and later the
// data-parallel buckets and ZeRO-1 shards all use one layout, so the same element offset names
// the same parameter element in every buffer: a contiguous range of one buffer is a bucket or a
// shard of all of them.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "lib/tensor.h"

namespace ft {

class FlatLayout {
 public:
  /// Each tensor starts at a multiple of this many elements (512 bytes of f32, 256 of bf16):
  /// every view is aligned for 16-byte vector loads and the multi-tensor kernels, and a bf16
  /// buffer of the layout (ZeRO-1's gathered parameters) gives its weights the 256-byte alignment
  /// of a separate allocation, the most cuBLASLt's algorithm heuristics ask about. (With 64, the
  /// gpt2-124M ZeRO-1 step took the same time and gave the same losses on the H100.) The gap
  /// elements are zero and unused.
  static constexpr int64_t kAlign = 128;

  /// One flat buffer: the tensors of one dtype (a group key) on one device, in list order.
  struct Group {
    DType dtype;
    Device device;
    int64_t size = 0;             // elements, gaps included (a multiple of kAlign)
    std::vector<size_t> members;  // indices into the tensor list
  };
  /// Where tensor i lives: elements [offset, offset + numel) of group `group`.
  struct Slot {
    size_t group = 0;
    int64_t offset = 0;
    Shape shape;
    int unit = -1;  // the gathering unit it belongs to (ZeRO-3's layers), or -1
    int64_t numel() const { return shape_numel(shape); }
  };

  /// A contiguous range [begin, end) of group `group`, reduced as one collective by data
  /// parallelism; `members` are the tensors with an element in it.
  struct Bucket {
    size_t group = 0;
    int64_t begin = 0, end = 0;
    std::vector<size_t> members;
    int unit = -1;  // the unit of its members: a bucket never spans two units
    int64_t size() const { return end - begin; }
    /// Rank `rank`'s equal part of it, [first, second) (ZeRO-1's shard of the bucket).
    std::pair<int64_t, int64_t> chunk(int rank, int world) const;
  };

  FlatLayout() = default;
  /// tensors[i] goes to the group of (dtypes[i], tensors[i].device()); groups are ordered by first
  /// appearance, and tensors within a group by their index. Each group's size is rounded up to a
  /// multiple of `group_multiple` (a multiple of kAlign): kAlign times the data-parallel world
  /// size, so that every bucket splits into equal parts (the padding is zeros, never written).
  /// `units` (empty, or one a tensor: -1 for none) groups tensors into units that buckets never
  /// mix: where a group's tensors change unit, the next one starts at a multiple of
  /// group_multiple, so that a bucket boundary can fall there.
  FlatLayout(const std::vector<Tensor>& tensors, const std::vector<DType>& dtypes, int64_t group_multiple = kAlign,
             const std::vector<int>& units = {});

  size_t size() const { return slots_.size(); }
  const std::vector<Group>& groups() const { return groups_; }
  const Slot& slot(size_t i) const { return slots_.at(i); }

  /// A zeroed buffer for group g: [groups()[g].size] of `dtype` (default: the group's) on its device.
  Tensor allocate(size_t g) const;
  Tensor allocate(size_t g, DType dtype) const;
  /// Tensor i's view (its shape) into `flat`, a buffer of its group from allocate().
  Tensor view(const Tensor& flat, size_t i) const;
  /// Every group cut into buckets of at most `max_elements` (at least kAlign · world), each a
  /// multiple of kAlign · world elements (the group sizes must be: see group_multiple), in the
  /// order backward produces gradients: each group from its end to its beginning (the last
  /// parameters' gradients come first). A bucket boundary may fall inside a tensor: that
  /// tensor is a member of both buckets. A bucket holds tensors of one unit only.
  std::vector<Bucket> buckets(int64_t max_elements, int world) const;

 private:
  std::vector<Group> groups_;
  std::vector<Slot> slots_;
};

}  // namespace ft
