// The range of ids of one bag, checked: shared by the twin's bag_rows kernel and the fused
// embedding bag's kernels, so that both read offsets (and flag bad ones) the same way.
#pragma once
#include "lib/cuda/math.cuh"
#include "lib/runtime.h"  // the device error codes

namespace ft::cuda {

struct BagRange {
  int64_t begin, end;
};

/// Ids [begin, end) of bag k of `bags`, from offsets [bags + 1] over n ids. Offsets that do not
/// start at 0, end at n, or that decrease flag kIndexOutOfRange, and the range is clamped into
/// [0, n) so that nothing reads out of bounds.
__device__ __forceinline__ BagRange bag_range(const void* offsets, bool offsets64, int64_t k, int64_t bags, int64_t n,
                                              unsigned* error_word) {
  int64_t begin = load_id(offsets, offsets64, k), end = load_id(offsets, offsets64, k + 1);
  const bool bad_ends = (k == 0 && begin != 0) || (k == bags - 1 && end != n);
  if (bad_ends || begin > end || begin < 0 || end > n) {
    atomicOr(error_word, kIndexOutOfRange);
    begin = begin < 0 ? 0 : (begin > n ? n : begin);
    end = end < begin ? begin : (end > n ? n : end);
  }
  return {begin, end};
}

/// The table row of id i of a bag of table t: row_offsets[t] + id, or the table's first row
/// (flagging kIndexOutOfRange) for an id outside the table.
__device__ __forceinline__ int64_t bag_row(const void* ids, bool ids64, int64_t i, const int64_t* row_offsets,
                                           int64_t t, unsigned* error_word) {
  const int64_t first = row_offsets[t], id = load_id(ids, ids64, i);
  if (id < 0 || id >= row_offsets[t + 1] - first) {
    atomicOr(error_word, kIndexOutOfRange);
    return first;
  }
  return first + id;
}

}  // namespace ft::cuda
