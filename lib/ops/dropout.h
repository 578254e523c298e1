// Dropout with a Philox mask: element i is kept when philox::uniform(seed, offset, i) >= p
// (compared in f32), and kept values are scaled by 1/(1 - p). The mask depends only on
// (seed, offset, i), so every path and device draws the same one. Nothing is stored for
// backward but the seed and offset. p = 0 returns x; p = 1 returns zeros.
#pragma once
#include "lib/tensor.h"

namespace ft {

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);

}  // namespace ft
