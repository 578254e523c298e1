// Persistent gradient storage: the gradients of a list of trainable leaves live in one flat
// buffer per dtype (FlatLayout), and each leaf's .grad() is its view of it for as long as the
// GradBuffer lives. Backward adds into the views in place (autograd.h), nothing is allocated per
// step, and zeroing is one memset per buffer, inside a captured step like any other kernel.
//
// The gradient dtype is f64 for f64 leaves and f32 for every other (bf16 parameters on CUDA get
// f32 gradients: what the optimizer's f32 master weights want, and what data-parallel
// all-reduces sum without losing bits).
#pragma once
#include <vector>

#include "lib/flat_layout.h"
#include "lib/tensor.h"

namespace ft {

class GradBuffer {
 public:
  GradBuffer() = default;
  /// Attaches a zeroed view to every leaf (each must require grad and have no view yet); a
  /// gradient a leaf held before is dropped. Each buffer is padded to a multiple of
  /// `group_multiple` elements (FlatLayout). Without `storage` (ZeRO-2: data parallelism moves
  /// each gradient into a bucket as it completes and keeps only this rank's shard) there is only
  /// the layout: the leaves keep gradients of their own, which zero() releases. `units`: the
  /// layout's (FlatLayout), one a leaf or empty.
  explicit GradBuffer(const std::vector<Tensor>& leaves, int64_t group_multiple = FlatLayout::kAlign,
                      bool storage = true, const std::vector<int>& units = {});
  ~GradBuffer();
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

  /// The gradient dtype of a parameter: f64 for f64, else f32.
  static DType grad_dtype(const Tensor& param);

  /// Every gradient = 0, logically: no kernel is enqueued (without storage: each leaf's own
  /// gradient is released). Each view is marked zero and stale;
  /// the first contribution of the next backward overwrites it whole (cuBLASLt with beta = 0, a
  /// norm's column sums, a written copy), so a step whose backward reaches every parameter
  /// zeroes nothing, and whatever is still stale is zeroed when read (materialize).
  void zero();
  /// Zeroes the views still stale since zero() (one memset each: parameters the last backward
  /// did not reach), so that the flat buffers hold the true gradients. flat(), flats() and every
  /// leaf's grad() call it.
  void materialize() const;
  const FlatLayout& layout() const { return layout_; }
  /// Whether the flat buffers exist (see the constructor's `storage`).
  bool has_storage() const { return storage_; }
  /// Group g's flat buffer (a contiguous range of it is a bucket or a shard).
  const Tensor& flat(size_t g) const;
  const std::vector<Tensor>& flats() const;
  /// Group g's buffer as it is, stale views included (a data-parallel bucket whose members the
  /// running backward has all written).
  const Tensor& storage(size_t g) const;
  size_t groups() const { return layout_.groups().size(); }
  /// Leaf i's gradient view.
  Tensor grad(size_t i) const { return leaves_.at(i).grad(); }
  const std::vector<Tensor>& leaves() const { return leaves_; }

 private:
  std::vector<Tensor> leaves_, flats_;
  FlatLayout layout_;
  bool storage_ = true;
};

}  // namespace ft
