// Fused LayerNorm / RMSNorm forward, with the optional residual add in front and the optional
// activation and dropout after (norm_kernels.cuh has what the kernels share).
//
// A "row group" normalizes one row at a time: a warp when the row fits in 32 threads' registers
// (C <= 32·4 packs, the GPT-2 case: shuffles only, no barriers), else the whole block. Each
// thread holds its packs of the row in registers, so x (and the residual) are read from HBM
// once; the residual sum is stored once, the output written once, and only rstd (f32) is saved
// besides the output, from which backward takes x̂ (the epilogue form keeps its input and mean
// instead). Backward holds that tensor and dy the same way and writes dx once; the weight and bias
// gradients of each column are accumulated by the one thread that owns the column, in shared
// memory (no atomics, fixed order), and the per-block partials are added by a small column
// kernel in block order. Replaces the twin's cast, mean, sub, mul, rsqrt and add kernels and
// their backward chains.
#include "lib/ops/norm/norm_kernels.cuh"

namespace ft::cuda {

namespace {

using namespace norm_kernels;

template <class T, int V, int P, bool kRms, bool kWarpRows, bool kEpilogue>
__global__ void __launch_bounds__(kMaxThreads<V, kWarpRows>, kWarpRows ? kNormForwardBlocks : 1) norm_forward_kernel(const T* x, const T* residual, const T* weight, const T* bias, T* sum, T* out,
                                    float* mean_out, float* rstd_out, int64_t rows, int64_t cols, float eps,
                                    Epilogue epi) {
  begin_dependent_kernel();
  __shared__ float scratch[33];
  const RowGroup<kWarpRows> group;
  const uint64_t offset = kEpilogue && epi.p > 0.0f ? static_cast<uint64_t>(*epi.offset) : 0;
  const int64_t step = static_cast<int64_t>(group.size()) * V;
  for (int64_t r = group.first_row(); r < rows; r += group.row_stride()) {
    float s[P][V];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
      load_vec<T, V>(x + r * cols + c, s[p]);
      if (residual) {
        float res[V];
        load_vec<T, V>(residual + r * cols + c, res);
#pragma unroll
        for (int k = 0; k < V; ++k) s[p][k] = rounded<T>(s[p][k] + res[k]);  // as the twin stores the sum
        store_vec<T, V>(sum + r * cols + c, s[p]);
      }
    }
    // The keep bits depend only on the elements' indices: drawn here, the Philox rounds run
    // while the row's loads are in flight.
    KeepBits<V, P> keep = 0;
    if (kEpilogue && epi.p > 0.0f)
      keep = drawn_keep_bits<V, P>(epi.seed, offset, r * cols, group.rank() * V, static_cast<int>(step), cols, epi.p);
    float part = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (group.rank() * V + p * step >= cols) break;
#pragma unroll
      for (int k = 0; k < V; ++k) part += s[p][k];
    }
    const float mean = kRms ? 0.0f : group.sum(part, scratch) / static_cast<float>(cols);
    part = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
#pragma unroll
      for (int k = 0; k < V; ++k) part += (s[p][k] - mean) * (s[p][k] - mean);
    }
    const float rstd = rsqrtf(group.sum(part, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t c = group.rank() * V + p * step;
      if (c >= cols) break;
      float w[V], b[V] = {};
      load_vec<T, V>(weight + c, w);
      if (bias) load_vec<T, V>(bias + c, b);
#pragma unroll
      for (int k = 0; k < V; ++k) s[p][k] = (s[p][k] - mean) * rstd * w[k] + b[k];
      if constexpr (kEpilogue) {
        if constexpr (V % 8 == 0) {
          if (epi.p > 0.0f && epi.mask) {
#pragma unroll
            for (int q = 0; q < V; q += 8)
              epi.mask[(r * cols + c + q) >> 3] = static_cast<uint8_t>(keep >> (p * V + q));
          }
        }
        with_activation(epi.act, [&](auto act) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            s[p][k] = activate(act, s[p][k], kFastMath<T>);
            if (epi.p > 0.0f) s[p][k] = kept<V, P>(keep, p, k) ? s[p][k] * epi.scale : 0.0f;
          }
        });
      }
      store_vec<T, V>(out + r * cols + c, s[p]);
    }
    if (group.rank() == 0) {
      if (mean_out) mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

// dx = rstd·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)); RMS drops the first mean.
// Shared memory: one [2, padded cols] slice (dweight, dbias; [3, ..] with dx's column sums) per
// row group of the block, then in the plain norms the block's [3, padded cols] column parameters
// (w, b, 1/w), then the staged rows; the slices are laid out
// column-group-major and thread-minor (slice_index): each warp access then touches 32
// consecutive words. Indexed by column, a lane's 8 consecutive columns put lanes 0, 4, 8, ...
// on one bank, an 8-way conflict on all four accesses per element, which bound the kernel far
// below the memory bandwidth.
// `saved` and dy stay in registers as loaded (packed bf16 is half the registers of f32), and x̂
// and dy·w are computed again for dx instead of being kept.
// What the forward saved decides where x̂ comes from. Plain norms (no epilogue) saved their
// output y = x̂·w + b, which the next op keeps anyway, so that their input can die: x̂ is
// (y − b)/w. Then dy·w·x̂ = dy·(y − b), and dweight's Σ dy·x̂ is Σ dy·(y − b) divided by w once
// per column (sum_partials_kernel), so only dx needs 1/w, per element: the block computes it
// once a column, with w and b, into shared memory (kColumnParamSlices; held in registers, the
// packed bf16 kernel spilled). With an epilogue the output is not y, so the input x was saved and
// x̂ = (x − mean)·rstd.

}  // namespace

bool norm_supported(int64_t cols) { return cols >= 1 && cols <= 1024 * kBlockPacks; }

bool norm_forward(NormKind kind, const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                  double eps, const Tensor& sum, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                  const NormEpilogue& epilogue) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.data_ptr() : nullptr; };
  FT_CHECK(!epilogue.mask.defined() ||
               (epilogue.mask.dtype() == DType::U8 && epilogue.mask.numel() >= (x.numel() + 7) / 8),
           "norm forward: the dropout mask must hold ", (x.numel() + 7) / 8, " bytes (U8), got ",
           epilogue.mask.numel(), " ", dtype_name(epilogue.mask.dtype()));
  bool mask_written = false;
  with_norm_config(
      kind, x.dtype(), cols, {ptr(x), ptr(residual), ptr(weight), ptr(bias), ptr(sum), ptr(out)}, epilogue.active(),
      [&](auto tag, auto vec, auto rms, auto warp_rows, auto packs, auto epi, const Launch& launch) {
        using T = decltype(tag);
        constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
        constexpr bool kR = decltype(rms)::value, kW = decltype(warp_rows)::value;
        auto kernel = norm_forward_kernel<T, V, P, kR, kW, decltype(epi)::value>;
        mask_written = decltype(epi)::value && V % 8 == 0 && epilogue.dropout_p > 0.0 && epilogue.mask.defined();
        launch_dependent(kernel, grid_for(launch, rows, 64LL * multiprocessor_count()), launch.threads, 0, x.data<T>(),
                         static_cast<const T*>(ptr(residual)), weight.data<T>(), static_cast<const T*>(ptr(bias)),
                         sum.defined() ? sum.data<T>() : nullptr, out.data<T>(),
                         mean.defined() ? mean.data<float>() : nullptr, rstd.data<float>(), rows, cols,
                         static_cast<float>(eps), device_epilogue(epilogue));
        FT_CUDA_CHECK_LAUNCH("norm_forward_kernel");
      });
  return mask_written;
}

}  // namespace ft::cuda
