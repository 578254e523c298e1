// CPU-only builds (FT_CUDA=OFF): the runtime reports no GPU and every CUDA launcher throws.
// No CUDA tensor can be created in such a build, so the launchers are unreachable in practice.
#include <cstdlib>
#include <cstring>

#include "lib/cuda/launchers.h"
#include "lib/error.h"
#include "lib/ops/attention.h"
#include "lib/ops/bias_act.h"
#include "lib/ops/cross_entropy.h"
#include "lib/ops/dropout.h"
#include "lib/ops/embedding.h"
#include "lib/ops/layer_norm.h"
#include "lib/ops/linear.h"
#include "lib/ops/lora_linear.h"
#include "lib/ops/softmax.h"
#include "lib/runtime.h"

namespace ft {

bool cuda_available() { return false; }
CapturedGraph::CapturedGraph(const std::function<void()>&, const DeviceWrites*) {
  FT_FAIL("CapturedGraph: built without CUDA");
}
CapturedGraph::~CapturedGraph() = default;
void CapturedGraph::replay() { FT_FAIL("CapturedGraph: built without CUDA"); }
void CapturedGraph::replay(const DeviceWrites&) { FT_FAIL("CapturedGraph: built without CUDA"); }
void synchronize() {}
std::string device_name() { return ""; }
std::string device_identity() { return ""; }
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(Stream) {}
void StreamEvent::wait(Stream) const {}
void StreamEvent::synchronize() const {}
bool capturing() { return false; }
size_t device_memory_in_use() { return 0; }
void reset_peak_memory() {}
void release_cached_memory() {}
size_t device_memory_total() { return 0; }
size_t peak_memory() { return 0; }
void profiler_start() {}
void profiler_stop() {}

namespace runtime {
void* allocate(size_t bytes, Device device) {
  FT_CHECK(device.is_cpu(), "fusedtrain was built without CUDA (FT_CUDA=OFF): cannot allocate on ", device.str());
  return allocate_host(bytes);
}
void release(void* ptr, Device) { std::free(ptr); }
void copy_bytes(void* dst, Device, const void* src, Device, size_t bytes) { std::memcpy(dst, src, bytes); }
void zero_bytes(void* dst, Device, size_t bytes) { std::memset(dst, 0, bytes); }
void* allocate_pinned(size_t bytes) { return allocate(bytes, kCPU); }
void release_pinned(void* ptr) { std::free(ptr); }
void copy_to_device_async(void*, const void*, size_t) { FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)"); }
const void* device_error_word_address() { return nullptr; }
void write_on_device(const DeviceWrites& writes) {
  FT_CHECK(writes.empty(), "fusedtrain was built without CUDA (FT_CUDA=OFF): no device to write to");
}
}  // namespace runtime

namespace cuda {
namespace {
[[noreturn]] void unavailable() { FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)"); }
}  // namespace
void unary(UnaryOp, const Tensor&, const Tensor&, double, double) { unavailable(); }
void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&, const BroadcastPlan&) { unavailable(); }
void compare(CompareOp, const Tensor&, const Tensor&, const Tensor&, const BroadcastPlan&) { unavailable(); }
void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const BroadcastPlan&) { unavailable(); }
void cast(const Tensor&, const Tensor&) { unavailable(); }
void accumulate(const Tensor&, const Tensor&, bool, const Tensor&) { unavailable(); }
void fill(const Tensor&, double) { unavailable(); }
void arange(const Tensor&) { unavailable(); }
void reduce_last(ReduceOp, const Tensor&, const Tensor&, int64_t, int64_t) { unavailable(); }
void reduce_middle(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) { unavailable(); }
void column_sums(const Tensor&, int64_t, int64_t, const GradOutput&) { unavailable(); }
void partial_row_sums(const Tensor&, const GradOutput&) { unavailable(); }
void matmul(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool, double,
            const Tensor&) {
  unavailable();
}
void transpose_last2(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) { unavailable(); }
void copy_rows(void*, size_t, const void*, size_t, size_t, size_t) { unavailable(); }
void gather_rows(const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void scatter_add_rows(const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void gather_last(const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void put_last(const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void softmax_forward(const Tensor&, const Tensor&, bool) { unavailable(); }
void softmax_backward(const Tensor&, const Tensor&, const Tensor&, bool) { unavailable(); }
void validate_ids(const Tensor&, int64_t, int64_t, unsigned) { unavailable(); }
void philox_uniform(const Tensor&, uint64_t, const Tensor&, bool) { unavailable(); }
void philox_take(const Tensor&, const Tensor&, uint64_t) { unavailable(); }
}  // namespace cuda

namespace cuda {
void linear_forward(const Tensor&, const Tensor&, const Tensor&, Activation, const Tensor&, const Tensor&) {
  FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)");
}
void linear_backward(const Tensor&, const Tensor&, const Tensor&, Activation, const Tensor&, const Tensor&,
                     const GradOutput&, const GradOutput&) {
  FT_FAIL("fusedtrain was built without CUDA (FT_CUDA=OFF)");
}
void lora_merge(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&) { unavailable(); }
bool narrow_linear_supported(const Tensor&, const Tensor&) { return false; }
void narrow_linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void narrow_linear_backward_params(const Tensor&, const Tensor&, const GradOutput&, const GradOutput&) {
  unavailable();
}
LoRASaved lora_linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const LoRAOptions&, const Tensor&) {
  unavailable();
}
void lora_linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const LoRAOptions&,
                          const LoRASaved&, const Tensor&, const GradOutput&, const GradOutput&, const GradOutput&) {
  unavailable();
}
void bias_act_forward(const Tensor&, const Tensor&, Activation, const Tensor&) { unavailable(); }
void bias_act_backward(const Tensor&, const Tensor&, const Tensor&, Activation, const Tensor&, const GradOutput&) {
  unavailable();
}
void swiglu_forward(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, const Tensor&) { unavailable(); }
void swiglu_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, const Tensor&,
                     const Tensor&) {
  unavailable();
}
void dropout_forward(const Tensor&, const Tensor&, const Tensor&, double, uint64_t, const Tensor&, const Tensor&) {
  unavailable();
}
void dropout_backward(const Tensor&, double, uint64_t, const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
bool norm_supported(int64_t) { return false; }
bool norm_forward(NormKind, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                  const Tensor&, const Tensor&, const Tensor&, const NormEpilogue&) {
  unavailable();
}
void norm_backward(NormKind, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const GradOutput&, const GradOutput&, const NormEpilogue&, const Tensor&, const Tensor&,
                   const GradOutput&) {
  unavailable();
}
void cross_entropy_count(const Tensor&, int64_t, int64_t, const Tensor&) { unavailable(); }
void cross_entropy_forward(const Tensor&, const Tensor&, const CrossEntropyOptions&, const Tensor&, const Tensor&, bool,
                           const Tensor&) {
  unavailable();
}
void scale_by_upstream(const Tensor&, const Tensor&) { unavailable(); }
void token_position_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { unavailable(); }
void token_position_backward(const Tensor&, const Tensor&, const GradOutput&, const GradOutput&) { unavailable(); }
bool attention_supported(int64_t) { return false; }
namespace {
FlashKernels flash_kernels_choice = FlashKernels::PreferHopper;  // kept as set; nothing runs it here
}  // namespace
void set_flash_kernels(FlashKernels choice) { flash_kernels_choice = choice; }
FlashKernels flash_kernels() { return flash_kernels_choice; }
bool hopper_flash_available() { return false; }
void attention_forward(const AttentionShape&, const AttentionInputs&, void*, HeadStrides, const Tensor&, bool, double,
                       uint64_t, const Tensor&) {
  unavailable();
}
bool attention_backward(const AttentionShape&, const AttentionInputs&, const void*, const void*, HeadStrides,
                        const Tensor&, const AttentionGrads&, bool, double, uint64_t, const Tensor&) {
  unavailable();
}
int64_t qkv_bias_partial_rows(const AttentionShape&) { unavailable(); }
}  // namespace cuda

}  // namespace ft
