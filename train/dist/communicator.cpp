#include "train/dist/communicator.h"

#include "lib/error.h"
#ifdef FT_WITH_GLOO
#include "train/dist/gloo_communicator.h"
#endif
#ifdef FT_WITH_CUDA
#include "train/dist/nccl_communicator.h"
#endif

namespace ft {

void Communicator::check_tensor(const char* collective, const Tensor& t, Device device) {
  FT_CHECK(t.defined(), collective, ": the tensor is undefined");
  FT_CHECK(t.device() == device, collective, ": the tensor is on ", t.device().str(), ", this communicator's on ",
           device.str());
}

void Communicator::check_parts(const char* collective, const Tensor& whole, const Tensor& part, Device device) const {
  check_tensor(collective, whole, device);
  check_tensor(collective, part, device);
  FT_CHECK(whole.numel() == part.numel() * world_size() && whole.dtype() == part.dtype(), collective, ": ",
           whole.numel(), " ", dtype_name(whole.dtype()), " elements for all ranks and ", part.numel(), " ",
           dtype_name(part.dtype()), " for one: the first must be world size (", world_size(),
           ") times the second, of one dtype");
}

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, Device device, const CommOptions& options) {
  if (device.is_cuda()) {
#ifdef FT_WITH_CUDA
    return make_nccl_communicator(env, device, options);
#else
    FT_FAIL("data parallelism on CUDA needs a CUDA build (NCCL)");
#endif
  }
#ifdef FT_WITH_GLOO
  return make_gloo_communicator(env, options);
#else
  (void)env;
  (void)options;
  FT_FAIL("data parallelism on the CPU needs Gloo: install libgloo-dev (scripts/install_deps.sh) and rebuild");
#endif
}

}  // namespace ft
