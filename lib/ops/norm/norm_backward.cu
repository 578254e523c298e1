// Fused LayerNorm / RMSNorm backward (norm_forward.cu says what the forward saves): each thread
// holds its packs of the saved tensor and dy in registers and writes dx once; the weight and bias
// gradients of each column are accumulated by the one thread that owns the column, in shared
// memory (no atomics, fixed order), and the per-block partials are added by a small column kernel
// in block order.
#include "lib/ops/norm/norm_kernels.cuh"

namespace ft::cuda {

namespace {

using namespace norm_kernels;

// From the output: the columns' weight, bias and 1/weight in shared memory, in the slices'
// order, for every row to read per pack. A pack a thread, both loads issued first: a column a
// thread left three loads' latency in series at the start of every block. Packs never straddle
// ncols (cols is a multiple of V), so the padding words are never read.
template <class T, int V, bool kRms>
__device__ __forceinline__ void stage_column_params(const T* weight, const T* bias, float* column_params, int ncols,
                                                    int padded, int group_size, int step) {
  for (int c = threadIdx.x * V; c < ncols; c += blockDim.x * V) {
    float w[V], b[V] = {};
    load_vec<T, V>(weight + c, w);
    if constexpr (!kRms) load_vec<T, V>(bias + c, b);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int at = slice_index<V>(c + k, group_size, step);
      column_params[kWeightSlice * padded + at] = w[k];
      column_params[kBiasSlice * padded + at] = b[k];
      column_params[kInverseWeightSlice * padded + at] = 1.0f / w[k];
    }
  }
  __syncthreads();
}

// Row r's packs of the saved tensor and dy, copied asynchronously into a stage (the two rows'
// `padded` words); past the last row an empty group keeps the wait count uniform.
template <class T, int V, int P>
__device__ __forceinline__ void stage_row_copies(T* to, const T* saved, const T* dy, int64_t r, int64_t rows,
                                                 int64_t cols, int first_column, int step, int padded) {
  if (r < rows) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = first_column + p * step;
      if (c >= cols) break;
      mma::copy_async16(to + c, saved + r * cols + c, 16);
      mma::copy_async16(to + padded + c, dy + r * cols + c, 16);
    }
  }
  mma::commit_copies();
}

// dx of one row from its registers (xs: the saved tensor, gs: dy through the epilogue), the
// row's two means known: stored once, plus the residual's gradient when there is one, its
// column sums (as stored) kept in registers or the third slice.
template <class T, int V, int P, bool kRms, bool kFromOutput, bool kSumsInRegisters, int R>
__device__ __forceinline__ void write_row_dx(const Pack<T, V> (&xs)[P], const Pack<T, V> (&gs)[P],
                                             const SliceWords<V>& params, const SliceWords<V>& acc, const T* weight,
                                             T* dx_row, const T* addend_row, int ncols,
                                             int first_column, int step, float rstd, float shift, float mean_g,
                                             float mean_gx, bool sum_dx, float (&dx_sums)[R][V]) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int c = first_column + p * step;
    if (c >= ncols) break;
    float w[V], b[V] = {}, inv_w[V], d[V];
    if constexpr (kFromOutput) {
      params.read(p, kWeightSlice, w);
      if constexpr (!kRms) params.read(p, kBiasSlice, b);
      params.read(p, kInverseWeightSlice, inv_w);
    } else {
      load_vec<T, V>(weight + c, w);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xhat = kFromOutput ? (element(xs[p], k) - b[k]) * inv_w[k] : fmaf(element(xs[p], k), rstd, shift);
      d[k] = rstd * (element(gs[p], k) * w[k] - mean_g - xhat * mean_gx);
    }
    if (addend_row) {  // the residual stream's gradient, added before the one rounding to T
      float a[V];
      load_vec<T, V>(addend_row + c, a);
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] += a[k];
    }
    if (sum_dx) {  // as stored: rounded to T (storing a rounded value rounds nothing more)
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] = rounded<T>(d[k]);
      if constexpr (kSumsInRegisters) {
#pragma unroll
        for (int k = 0; k < V; ++k) dx_sums[p][k] += d[k];
      } else {
        acc.add_one(p, kDxSumSlice, d);
      }
    }
    store_vec<T, V>(dx_row + c, d);
  }
}

// The block's partial row: its row groups' slices (dweight, dbias and dx's column sums) added
// in group order, whatever shared memory held them.
template <class T, int V, int P, bool kFromOutput, bool kSumsInRegisters, class Group, int R>
__device__ __forceinline__ void write_block_partial(const Group& group, const float (&dx_sums)[R][V], bool sum_dx,
                                                    bool dx_sums_in_stages, T* stages_base, float* slices,
                                                    int slice_rows, int padded, int groups, int step, int ncols,
                                                    int64_t cols, float* partials, const T* weight,
                                                    unsigned* error_word) {
  // The row group's dx sums, where the block's sum below reads them: the first words of the
  // warp's stages (its copies all landed; the loop's last wait left only an empty group), or
  // the third slice.
  auto dx_sum_words = [&](int g) {
    return dx_sums_in_stages ? reinterpret_cast<float*>(stages_base) + g * (4 * padded * sizeof(T) / sizeof(float))
                             : slices + (g * slice_rows + kDxSumSlice) * padded;
  };
  if constexpr (kSumsInRegisters) {
    if (sum_dx) {
      if (dx_sums_in_stages) mma::wait_copies<0>();
      const SliceWords<V> words{dx_sum_words(threadIdx.x / 32) + group.rank() * kSliceWidth<V>, group.size(), padded};
#pragma unroll
      for (int p = 0; p < P; ++p)
        if (group.rank() * V + p * step < ncols) words.write(p, 0, dx_sums[p]);
    }
  }
  __syncthreads();
  // This block's partial: its row groups' slices added in group order.
  for (int j = threadIdx.x; j < ncols; j += blockDim.x) {
    const int at = slice_index<V>(j, group.size(), step);
    float dweight = 0.0f, dbias = 0.0f, dx_sum = 0.0f;
    for (int g = 0; g < groups; ++g) {
      dweight += slices[g * slice_rows * padded + at];
      dbias += slices[g * slice_rows * padded + padded + at];
      if (sum_dx) dx_sum += dx_sum_words(g)[at];
    }
    // A partial row per block: dweight, dbias (and dx's sums), whatever shared memory held them.
    float* partial = partials + blockIdx.x * partial_sums(sum_dx) * cols;
    partial[j] = dweight;
    partial[cols + j] = dbias;
    if (sum_dx) partial[2 * cols + j] = dx_sum;
    // A zero weight erased x̂ from the output: dx and dweight are NaN there, and the caller
    // learns why at its next synchronizing read.
    if (kFromOutput && blockIdx.x == 0 && to_acc(weight[j]) == 0.0f) atomicOr(error_word, kNormZeroWeight);
  }
}

template <class T, int V, int P, bool kRms, bool kWarpRows, bool kEpilogue>
__global__ void __launch_bounds__(kMaxThreads<V, kWarpRows>, kWarpRows ? kNormBackwardBlocks : 1)
    norm_backward_kernel(const T* dy, const T* saved, const T* weight, const float* mean_in, const float* rstd_in,
                         T* dx, float* partials, int64_t rows, int64_t cols, const T* bias, Epilogue epi,
                         const T* addend, unsigned* error_word, bool stage_rows) {
  begin_dependent_kernel();
  constexpr bool kFromOutput = !kEpilogue;
  using Raw = Pack<T, V>;
  const bool staged = kStagedRows<T, V, kWarpRows, kEpilogue> && stage_rows;
  __shared__ float scratch[33];
  extern __shared__ float slices[];
  const RowGroup<kWarpRows> group;
  const int groups = kWarpRows ? blockDim.x / 32 : 1;
  // Column indices in 32 bits (cols <= 8192, norm_supported) to spare registers.
  const int step = group.size() * V, ncols = static_cast<int>(cols), padded = padded_cols(ncols, step);
  const bool sum_dx = epi.sum_dx;
  // dx's column sums: in registers in the plain warp-row kernels (kDxSumsInRegisters), which
  // write them at the end into their stages' memory when staged (else into a third slice); in
  // a third slice, added to per pack, elsewhere.
  const bool dx_sums_in_stages = kDxSumsInRegisters<kWarpRows, kEpilogue> && staged;
  const int slice_rows = group_slice_rows(sum_dx, dx_sums_in_stages);
  const SliceWords<V> acc{
      slices + (kWarpRows ? threadIdx.x / 32 : 0) * slice_rows * padded + group.rank() * kSliceWidth<V>, group.size(),
      padded};
  // Staged rows: the warp's two stages of (saved, dy) rows, after the block's slices and column
  // parameters. A lane copies exactly the packs it reads back, so its own wait makes them
  // visible: no barrier.
  float* column_params = slices + groups * slice_rows * padded;
  const SliceWords<V> params{column_params + group.rank() * kSliceWidth<V>, group.size(), padded};
  T* const stages_base = reinterpret_cast<T*>(column_params + (kFromOutput ? kColumnParamSlices * padded : 0));
  T* stages = stages_base + (threadIdx.x / 32) * 4 * padded;
  auto stage_row = [&](int64_t r, int stage) {
    stage_row_copies<T, V, P>(stages + stage * 2 * padded, saved, dy, r, rows, cols, group.rank() * V, step, padded);
  };
  int stage = 0;
  float dx_sums[kDxSumsInRegisters<kWarpRows, kEpilogue> ? P : 1][V] = {};
  if (staged) stage_row(group.first_row(), 0);
  for (int p = 0; p < padded / step; ++p)
#pragma unroll
    for (int k = 0; k < V; ++k)
      for (int slice = 0; slice < slice_rows; ++slice) acc.at(p, k)[slice * padded] = 0.0f;
  if constexpr (kFromOutput) stage_column_params<T, V, kRms>(weight, bias, column_params, ncols, padded, group.size(), step);
  for (int64_t r = group.first_row(); r < rows; r += group.row_stride(), stage ^= 1) {
    const float mean = kRms || kFromOutput ? 0.0f : mean_in[r], rstd = rstd_in[r];
    const float shift = -mean * rstd;  // x̂ = x·rstd + shift
    Raw xs[P], gs[P];
    auto read_row = [&](const T* saved_row, const T* dy_row) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int c = group.rank() * V + p * step;
        if (c >= ncols) break;
        xs[p] = *reinterpret_cast<const Raw*>(saved_row + c);
        gs[p] = *reinterpret_cast<const Raw*>(dy_row + c);
      }
    };
    if (staged) {
      // The next row's copies go out before this row is read: a row stays in flight while the
      // warp computes (rows loaded into registers kept too few bytes in flight per SM).
      stage_row(r + group.row_stride(), stage ^ 1);
      mma::wait_copies<1>();
      __syncwarp();  // orders the reads below after the wait for the compiler
      // Read through the shared array itself: through a pointer that may also point to global
      // memory the compiler issues generic loads, which wait on the long scoreboard.
      read_row(stages + stage * 2 * padded, stages + stage * 2 * padded + padded);
    } else {
      read_row(saved + r * cols, dy + r * cols);
    }
    KeepBits<V, P> keep = 0;
    if (kEpilogue && epi.p > 0.0f)
      keep = epi.mask ? saved_keep_bits<V, P>(epi.mask, r * cols, group.rank() * V, step, cols)
                      : redrawn_keep_bits<V, P>(epi.seed, static_cast<uint64_t>(*epi.offset), r * cols,
                                                group.rank() * V, step, cols, epi.p);
    float part_g = 0.0f, part_gx = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = group.rank() * V + p * step;
      if (c >= ncols) break;
      float w[V], b[V] = {};
      if constexpr (kFromOutput) {
        params.read(p, kWeightSlice, w);
        if constexpr (!kRms) params.read(p, kBiasSlice, b);
      } else {
        load_vec<T, V>(weight + c, w);
        if (bias) load_vec<T, V>(bias + c, b);
      }
      // v: x̂·w from the output (dweight is divided by w later), x̂ from the input.
      float g[V], v[V], gv[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        g[k] = element(gs[p], k);
        v[k] = kFromOutput ? element(xs[p], k) - b[k] : fmaf(element(xs[p], k), rstd, shift);
      }
      if constexpr (kEpilogue) {
        // dy is the gradient of dropout(act(y)), y = x̂·w + b: undo both first (rounded to T, as
        // the twin's chain stores that gradient), then the norm's backward runs on it.
        with_activation(epi.act, [&](auto act) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            if (epi.p > 0.0f) g[k] = kept<V, P>(keep, p, k) ? g[k] * epi.scale : 0.0f;
            if (act != Activation::None) g[k] *= activate_grad(act, v[k] * w[k] + b[k], kFastMath<T>);
          }
        });
        round_into_pack(g, gs[p]);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        part_g += g[k] * w[k];
        part_gx += kFromOutput ? g[k] * v[k] : g[k] * w[k] * v[k];
        gv[k] = g[k] * v[k];
      }
      acc.add(p, gv, g);
    }
    const float mean_g = kRms ? 0.0f : group.sum(part_g, scratch) / static_cast<float>(cols);
    const float mean_gx = group.sum(part_gx, scratch) / static_cast<float>(cols);
    write_row_dx<T, V, P, kRms, kFromOutput, kDxSumsInRegisters<kWarpRows, kEpilogue>>(
        xs, gs, params, acc, weight, dx + r * cols, addend ? addend + r * cols : nullptr, ncols,
        group.rank() * V, step, rstd, shift, mean_g, mean_gx, sum_dx, dx_sums);
  }
  write_block_partial<T, V, P, kFromOutput, kDxSumsInRegisters<kWarpRows, kEpilogue>>(
      group, dx_sums, sum_dx, dx_sums_in_stages, stages_base, slices, slice_rows, padded, groups, step, ncols, cols,
      partials, weight, error_word);
}

// out[j] = Σ_b partials[b, j] over j in [sums, cols] (dweight, dbias, and with sums = 3 the
// dx column sums), dweight divided by weight_divisor[j] when given (the backward summed
// dy·x̂·w): sum_partial_rows (partial_rows.cuh) over the blocks' partial rows, 8 loads in flight.
template <class T>
__global__ void __launch_bounds__(kPartialRowWarps * 32)
    sum_partials_kernel(const float* partials, int blocks, int sums, int64_t cols, const T* weight_divisor,
                        GradSink<T> dweight, GradSink<T> dbias, GradSink<T> dx_sums) {
  begin_dependent_kernel();
  const int64_t j = blockIdx.x * 32LL + threadIdx.x % 32, stride = sums * cols;
  const float total = sum_partial_rows<8>(partials, blocks, stride, j, j < stride);
  if (threadIdx.x >= 32 || j >= stride) return;
  if (j < cols) {
    if (dweight.any()) dweight.store(j, weight_divisor ? total / to_acc(weight_divisor[j]) : total);
  } else if (j < 2 * cols) {
    if (dbias.any()) dbias.store(j - cols, total);
  } else if (dx_sums.any()) {
    dx_sums.store(j - 2 * cols, total);
  }
}

}  // namespace

void norm_backward(NormKind kind, const Tensor& dy, const Tensor& saved, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const GradOutput& dweight, const GradOutput& dbias,
                   const NormEpilogue& epilogue, const Tensor& bias, const Tensor& addend,
                   const GradOutput& dx_column_sums) {
  const int64_t cols = saved.size(-1), rows = saved.numel() / cols;
  const bool from_output = !epilogue.active();
  // The RMS kernels have no epilogue form (with_norm_config runs the plain ones).
  FT_CHECK(kind == NormKind::Layer || !epilogue.active(), "norm backward: RMSNorm has no activation or dropout form");
  FT_CHECK(!dx_column_sums.defined() || dx_column_sums.tensor.numel() == cols,
           "norm backward: dx's column sums need ", cols, " elements, got ", dx_column_sums.tensor.numel());
  Epilogue device_epi = device_epilogue(epilogue);
  device_epi.sum_dx = dx_column_sums.defined();
  const int sums = partial_sums(device_epi.sum_dx);
  FT_CHECK(!addend.defined() || (addend.shape() == saved.shape() && addend.dtype() == saved.dtype()),
           "norm backward: the addend must be ", shape_str(saved.shape()), " ", dtype_name(saved.dtype()), ", got ",
           shape_str(addend.shape()), " ", dtype_name(addend.dtype()));
  FT_CHECK(kind == NormKind::RMS || (from_output ? bias.defined() : mean.defined()), "norm backward: LayerNorm needs ",
           from_output ? "the bias to take x̂ from its output" : "the saved mean with an epilogue");
  const void* addend_ptr = addend.defined() ? addend.data_ptr() : nullptr;
  with_norm_config(
      kind, saved.dtype(), cols,
      {dy.data_ptr(), saved.data_ptr(), weight.data_ptr(), dx.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr,
       addend_ptr},
      epilogue.active(), [&](auto tag, auto vec, auto rms, auto warp_rows, auto packs, auto epi, const Launch& launch) {
        using T = decltype(tag);
        constexpr int V = decltype(vec)::value, P = decltype(packs)::value;
        constexpr bool kR = decltype(rms)::value, kW = decltype(warp_rows)::value;
        auto kernel = norm_backward_kernel<T, V, P, kR, kW, decltype(epi)::value>;
        const int step = (launch.warp_rows ? 32 : launch.threads) * decltype(vec)::value;
        const size_t padded = static_cast<size_t>(padded_cols(static_cast<int>(cols), step));
        // The kernel's own notion of a plain norm (RMS always runs the plain kernels), so the
        // column parameters it writes always have their room.
        constexpr bool kPlain = !decltype(epi)::value;
        // The slices (dweight, dbias, and dx's column sums when asked and not kept in the staged
        // rows' memory; the column parameters in the plain norms), then for staged rows each
        // warp's 2 stages of (saved, dy).
        constexpr bool kInRegisters = kDxSumsInRegisters<kW, decltype(epi)::value>;
        auto shared_bytes = [&](bool staged) {
          const size_t groups = launch.warp_rows ? launch.threads / 32 : 1;
          const size_t slice_rows = group_slice_rows(device_epi.sum_dx, kInRegisters && staged);
          const size_t slices = (groups * slice_rows + (kPlain ? kColumnParamSlices : 0)) * padded * sizeof(float);
          return slices + (staged ? groups * 4 * padded * sizeof(T) : 0);
        };
        static_assert(4 * sizeof(T) >= sizeof(float), "a warp's stages hold its dx sums (padded floats)");
        // Rows are staged only while kNormBackwardBlocks blocks still fit: at C = 1024 (the MLP)
        // the stages would leave one block an SM, which is slower than not staging.
        const bool stage_rows = kStagedRows<T, V, kW, decltype(epi)::value> &&
                                kNormBackwardBlocks * (shared_bytes(true) + 1024) <= shared_memory_per_multiprocessor();
        const size_t smem = shared_bytes(stage_rows);
        // Whatever the size: the 48 KB default covers static and dynamic shared memory together,
        // so a dynamic size just under it plus the kernel's static scratch would not launch. Set
        // once per kernel and size reached (it was a host call every backward).
        static int opted_in_bytes = -1;
        if (static_cast<int>(smem) > opted_in_bytes) {
          FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
          opted_in_bytes = static_cast<int>(smem);
        }
        // As many blocks as fit at once (kNormBackwardBlocks per multiprocessor in warp
        // mode, bounded by the slices' shared memory); each adds one partial row.
        int resident = 0;
        FT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, launch.threads, smem));
        const int per_sm = std::clamp(resident, 1, launch.warp_rows ? kNormBackwardBlocks : 2);
        const unsigned blocks = grid_for(launch, rows, static_cast<int64_t>(per_sm) * multiprocessor_count());
        ColumnScratch scratch = column_scratch(blocks, sums * cols, 1);
        launch_dependent(kernel, blocks, launch.threads, smem, dy.data<T>(), saved.data<T>(), weight.data<T>(),
                         mean.defined() ? mean.data<float>() : nullptr, rstd.data<float>(), dx.data<T>(),
                         scratch.partials, rows, cols, bias.defined() ? bias.data<T>() : nullptr, device_epi,
                         static_cast<const T*>(addend_ptr), device_error_word(), stage_rows);
        FT_CUDA_CHECK_LAUNCH("norm_backward_kernel");
        if (dweight.defined() || dbias.defined() || dx_column_sums.defined()) {
          launch_dependent(sum_partials_kernel<T>, static_cast<unsigned>((sums * cols + 31) / 32),
                           kPartialRowWarps * 32, 0, scratch.partials, static_cast<int>(blocks), sums, cols,
                           kPlain ? weight.data<T>() : nullptr,
                           grad_sink<T>(dweight), grad_sink<T>(dbias), grad_sink<T>(dx_column_sums));
          FT_CUDA_CHECK_LAUNCH("sum_partials_kernel");
        }
      });
}

}  // namespace ft::cuda
