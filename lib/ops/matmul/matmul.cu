// The matmul primitive on cuBLASLt. Row-major C = op(A) op(B) is computed as the column-major
// Cᵀ = op(B)ᵀ op(A)ᵀ, which needs no data movement: a row-major matrix is its transpose in
// column-major order.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "lib/cuda/cublaslt.h"
#include "lib/cuda/runtime.h"
#include "lib/gemm_tuning.h"
#include "lib/ops/matmul/matmul_cuda.h"
#include "lib/runtime.h"

namespace ft::cuda {

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    default: FT_FAIL("matmul: unsupported dtype ", dtype_name(dtype));
  }
}

template <class T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  FT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

void set_layout_batch(cublasLtMatrixLayout_t layout, int64_t batch, int64_t stride) {
  int32_t count = static_cast<int32_t>(batch);
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  FT_CUBLAS_CHECK(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

using AlgoKey =
    std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, int64_t, int64_t, uint32_t>;

// The largest power of two (at most 256) dividing every pointer: views may start unaligned,
// and an algorithm chosen for aligned data would refuse them.
uint32_t common_alignment(std::initializer_list<const void*> pointers) {
  uint32_t alignment = 256;
  for (const void* p : pointers)
    if (p)
      while (reinterpret_cast<uintptr_t>(p) % alignment) alignment /= 2;
  return alignment;
}

/// Bytes from D's first element to its last: what a product writes into D.
size_t d_bytes(const LtGemm& g) {
  const int64_t extent = (g.batch - 1) * g.stride_d + (g.n - 1) * g.ldd + g.m;
  return static_cast<size_t>(extent) * dtype_size(g.d_dtype());
}

/// cuBLASLt's alpha and beta for g, in its compute type (f64 for f64 products, else f32).
struct Scalars {
  bool f64;
  double alpha64, beta64;
  float alpha32, beta32;
  explicit Scalars(const LtGemm& g)
      : f64(g.dtype == DType::F64),
        alpha64(g.alpha),
        beta64(g.accumulate ? 1.0 : 0.0),
        alpha32(static_cast<float>(g.alpha)),
        beta32(g.accumulate ? 1.0f : 0.0f) {}
  const void* alpha() const { return f64 ? static_cast<const void*>(&alpha64) : &alpha32; }
  const void* beta() const { return f64 ? static_cast<const void*>(&beta64) : &beta32; }
};

// What a product writes (D, a GELU/ReLU epilogue's saved pre-activation, a BGRAD epilogue's bias
// gradient), which cuBLAS's Hopper kernels store through TMA. D is left alone when the product
// is added to it.
void before_cublas_writes(const LtGemm& g) {
  const size_t element = dtype_size(g.d_dtype());
  if (!(g.accumulate && !g.c)) before_untracked_write(g.d, d_bytes(g));
  const bool writes_aux = g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                          g.epilogue == CUBLASLT_EPILOGUE_RELU_AUX || g.epilogue == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
  if (g.aux && writes_aux) before_untracked_write(g.aux, static_cast<size_t>((g.n - 1) * g.ld_aux + g.m) * element);
  const bool writes_bias = g.epilogue == CUBLASLT_EPILOGUE_BGRADA || g.epilogue == CUBLASLT_EPILOGUE_BGRADB ||
                           g.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD || g.epilogue == CUBLASLT_EPILOGUE_DRELU_BGRAD;
  if (g.bias && writes_bias)  // BGRADB sums over D's rows into n values; the others over its columns into m
    before_untracked_write(g.bias, static_cast<size_t>(g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? g.n : g.m) * element);
}

/// Candidates the autotuner times (cuBLASLt's heuristic order; the first is its own choice).
constexpr int kAutotuneCandidates = 8;

/// The key as the tuning file writes it: the fields joined by commas.
std::string key_text(const AlgoKey& key) {
  std::string text;
  std::apply([&](const auto&... field) { ((text += (text.empty() ? "" : ",") + std::to_string(field)), ...); }, key);
  return text;
}

/// What tuned choices hold for: the device (compute capability and name) and cuBLASLt's version.
std::string tuning_validator() {
  std::string name = device_name();
  for (char& c : name)
    if (c == ' ') c = '_';
  return "device=" + std::to_string(compute_capability()) + ":" + name +
         " cublasLt=" + std::to_string(cublasLtGetVersion());
}

/// The tuning file named now (gemm_tuning_file()), read again whenever it is named; null when
/// none is.
/// Called with try_run_gemm's lock held.
GemmTuningFile* tuning_file() {
  static std::unique_ptr<GemmTuningFile> file;
  static uint64_t loaded_generation = 0;
  const std::string path = gemm_tuning_file();
  if (path.empty()) return nullptr;
  const uint64_t generation = gemm_tuning_file_generation();
  if (!file || file->path() != path || generation != loaded_generation) {
    file = std::make_unique<GemmTuningFile>(path, tuning_validator());
    loaded_generation = generation;
  }
  return file.get();
}

/// The index of the fastest of `count` candidate algorithms for g: each runs twice to warm up,
/// then five times between events. The trials write a scratch D (reading g's addend, or g's D
/// when it is added to), so g's own D is untouched; the epilogue outputs they write (a GELU
/// epilogue's pre-activation, a BGRAD epilogue's bias gradient) are overwritten by the real run.
/// Without memory for the scratch D it returns 0, the heuristic's own first choice.
int fastest_candidate(const LtGemm& g, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                      cublasLtMatrixLayout_t ld, const cublasLtMatmulHeuristicResult_t* candidates, int count,
                      void* workspace, size_t workspace_bytes) {
  void* scratch = nullptr;
  if (cudaMallocAsync(&scratch, d_bytes(g), stream()) != cudaSuccess) {
    (void)cudaGetLastError();  // no room to time the candidates
    return 0;
  }
  // The trials write the workspace (split-K partials) through TMA too, as the real run does.
  before_untracked_write(workspace, workspace_bytes);
  const void* addend = g.c ? g.c : g.accumulate ? g.d : scratch;
  const Scalars scalars(g);
  auto run = [&](int i) {
    return cublasLtMatmul(cublaslt_handle(), desc, scalars.alpha(), g.a, la, g.b, lb, scalars.beta(), addend, ld,
                          scratch, ld, &candidates[i].algo, workspace, workspace_bytes,
                          stream()) == CUBLAS_STATUS_SUCCESS;
  };
  cudaEvent_t start, stop;
  FT_CUDA_CHECK(cudaEventCreate(&start));
  FT_CUDA_CHECK(cudaEventCreate(&stop));
  int best = -1;
  float best_ms = 0.0f;
  for (int i = 0; i < count; ++i) {
    if (!run(i) || !run(i)) continue;  // a candidate that cannot run is skipped
    FT_CUDA_CHECK(cudaEventRecord(start, stream()));
    for (int rep = 0; rep < 5; ++rep) run(i);
    FT_CUDA_CHECK(cudaEventRecord(stop, stream()));
    FT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (best < 0 || ms < best_ms) best = i, best_ms = ms;
  }
  FT_CUDA_CHECK(cudaEventDestroy(start));
  FT_CUDA_CHECK(cudaEventDestroy(stop));
  FT_CUDA_CHECK(cudaFreeAsync(scratch, stream()));
  return best < 0 ? 0 : best;  // none ran: the heuristic's first, whose own run reports why
}

}  // namespace

void run_gemm(const LtGemm& g) {
  FT_CHECK(try_run_gemm(g), "matmul: cuBLASLt found no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " dtype ",
           dtype_name(g.dtype), " into ", dtype_name(g.d_dtype()),
           " epilogue ", static_cast<int>(g.epilogue));
}

bool try_run_gemm(const LtGemm& g) {
  const cudaDataType_t type = cuda_type(g.dtype);
  const cudaDataType_t out_type = cuda_type(g.d_dtype());
  const bool f64 = g.dtype == DType::F64;
  cublasLtMatmulDesc_t desc;
  FT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
    if (g.bias) set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.aux) {
      set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
      set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_aux);
    }
  }
  cublasLtMatrixLayout_t la, lb, ld;
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  FT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, out_type, g.m, g.n, g.ldd));
  if (g.batch > 1) {
    set_layout_batch(la, g.batch, g.stride_a);
    set_layout_batch(lb, g.batch, g.stride_b);
    set_layout_batch(ld, g.batch, g.stride_d);
  }
  size_t workspace_bytes = 0;
  void* workspace = cublaslt_workspace(&workspace_bytes);

  // The heuristic query costs host time; remember the answer per configuration.
  static std::mutex mutex;
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> cache;
  const void* addend = g.c ? g.c : g.d;
  const uint32_t alignment = common_alignment({g.a, g.b, g.d, addend});
  // Autotuned choices are kept apart from the heuristic's, so switching it on retunes. A product
  // first met inside graph capture cannot be timed: it takes the tuning file's choice, or the
  // heuristic's.
  const bool autotune = gemm_autotune();
  const AlgoKey key{static_cast<int>(g.dtype) * 16 + static_cast<int>(g.d_dtype()), g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.batch, g.trans_a, g.trans_b,
                    static_cast<int>(g.epilogue) * 2 + (autotune ? 1 : 0), g.stride_b == 0 ? 0 : 1, g.ld_aux, alignment};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) {
      cublasLtMatmulPreference_t pref;
      FT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof(workspace_bytes)));
      for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        FT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
      // With autotuning on, the fastest of the heuristic's first candidates (as recorded in the
      // tuning file, or timed now and recorded there); else its first.
      cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates];
      int found = 0;
      const int wanted = autotune ? kAutotuneCandidates : 1;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc, la, lb, ld, ld, pref, wanted, results, &found);
      cublasLtMatmulPreferenceDestroy(pref);
      int best = 0;
      if (status == CUBLAS_STATUS_SUCCESS && found > 1) {
        GemmTuningFile* const file = tuning_file();
        const std::string text = file ? key_text(key) : std::string();
        const std::optional<int> recorded = file ? file->find(text) : std::nullopt;
        if (recorded && *recorded < found) {
          best = *recorded;
        } else if (!capturing()) {
          best = fastest_candidate(g, desc, la, lb, ld, results, found, workspace, workspace_bytes);
          if (file) file->record(text, best);
        }
      }
      cublasLtMatmulHeuristicResult_t& result = results[best];
      if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
        return false;
      }
      it = cache.emplace(key, result.algo).first;
    }
    algo = it->second;
  }
  const Scalars scalars(g);
  before_cublas_writes(g);
  // A split-K algorithm's partial sums go to the workspace through TMA too, and its reduce kernel
  // reads them: initcheck took each of those reads for uninitialized (millions, in
  // LinearCrossEntropyMemoryTest).
  before_untracked_write(workspace, workspace_bytes);
  FT_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), desc, scalars.alpha(), g.a, la, g.b, lb, scalars.beta(), addend,
                                 ld, g.d, ld, &algo, workspace, workspace_bytes, stream()));
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return true;
}

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, int64_t batch, int64_t m, int64_t n, int64_t k,
            bool trans_a, bool trans_b, bool b_batched, bool accumulate, double alpha, const Tensor& addend) {
  LtGemm g;
  g.accumulate = accumulate || addend.defined();
  if (addend.defined()) g.c = addend.data_ptr();
  g.alpha = alpha;
  g.dtype = a.dtype();
  g.out_dtype = out.dtype();  // f32 sums of bf16 products into a gradient view
  // Column-major view: Dᵀ[n, m] = op(B)ᵀ · op(A)ᵀ, with B and A as stored.
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = b.data_ptr();
  g.trans_a = trans_b;
  g.lda = trans_b ? k : n;
  g.b = a.data_ptr();
  g.trans_b = trans_a;
  g.ldb = trans_a ? m : k;
  g.d = out.data_ptr();
  g.ldd = n;
  g.batch = batch;
  g.stride_a = b_batched ? k * n : 0;
  g.stride_b = m * k;
  g.stride_d = m * n;
  if (!b_batched && !trans_a && batch > 1) {
    // A shared B with a row-major A: fold the batch into the rows, one larger product.
    g.n = batch * m;
    g.batch = 1;
  }
  run_gemm(g);
}

}  // namespace ft::cuda
