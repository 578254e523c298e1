// Binary cross-entropy on logits (lib/ops/bce/bce.h): one block reads each logit and label once,
// sums the losses in registers and one block reduction (a fixed order: the loss is
// reproducible), and writes the gradient (σ(x) − y)/N beside them, so backward has nothing to
// recompute. N is a recommender's batch (8K to 64K rows), well within one block's reach.
// Twin: relu, neg, mul, sub, exp, log, sum primitives.
#include "lib/ops/bce/bce_cuda.h"

#include "lib/cuda/dependent_launch.cuh"
#include "lib/cuda/math.cuh"
#include "lib/cuda/runtime.h"

namespace ft::cuda {

namespace {

constexpr int kBceThreads = 1024;

template <class T>
__global__ void bce_with_logits_kernel(const T* logits, const float* targets, int64_t n, float* loss, T* dlogits) {
  begin_dependent_kernel();
  __shared__ float scratch[33];
  const float inv_n = 1.0f / static_cast<float>(n);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = to_acc(logits[i]), y = targets[i];
    const float e = expf(-fabsf(x));
    sum += fmaxf(x, 0.0f) - x * y + log1pf(e);
    if (dlogits) {
      // σ(x) from e = e^−|x| without overflow on either side.
      const float sigmoid = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      dlogits[i] = from_acc<T>((sigmoid - y) * inv_n);
    }
  }
  const float total = block_sum(sum, scratch);
  if (threadIdx.x == 0) *loss = total * inv_n;
}

}  // namespace

void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& dlogits) {
  dispatch_half_float(logits.dtype(), "binary_cross_entropy_with_logits", [&](auto tag) {
    using T = decltype(tag);
    launch_dependent(bce_with_logits_kernel<T>, 1, kBceThreads, 0, logits.data<T>(), targets.data<float>(),
                     logits.numel(), loss.data<float>(), dlogits.defined() ? dlogits.data<T>() : nullptr);
  });
  FT_CUDA_CHECK_LAUNCH("bce_with_logits_kernel");
}

}  // namespace ft::cuda
