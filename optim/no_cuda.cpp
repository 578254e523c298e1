// A build without CUDA: the fused optimizer kernels are never chosen (fused_supported is false),
// so the others only say so if called directly.
#include "lib/error.h"
#include "optim/multi_tensor.h"

namespace ft::multi_tensor {

bool fused_supported(const std::vector<Tensor>&, DType) { return false; }

namespace {
[[noreturn]] void unavailable(const char* op) { FT_FAIL("multi_tensor::", op, ": this build has no CUDA"); }
}  // namespace

void settle_step(const std::vector<Tensor>&, const StepState&, const StepPolicy&,
                 const std::function<void(const Tensor&)>&) { unavailable("settle_step"); }
void scale(const std::vector<Tensor>&, const Tensor&) { unavailable("scale"); }
void zero(const std::vector<Tensor>&) { unavailable("zero"); }
void adamw(const std::vector<ParamSlots>&, const AdamWConfig&, const StepState&) { unavailable("adamw"); }
void sgd(const std::vector<ParamSlots>&, const SGDConfig&, const StepState&) { unavailable("sgd"); }

}  // namespace ft::multi_tensor
