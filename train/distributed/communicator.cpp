#include "train/distributed/communicator.h"

#include "lib/error.h"
#ifdef FT_WITH_GLOO
#include "train/distributed/gloo_communicator.h"
#endif
#ifdef FT_WITH_CUDA
#include "train/distributed/nccl_communicator.h"
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

void Communicator::check_exchange(const Tensor& input, const std::vector<int64_t>& send_counts, const Tensor& out,
                                  const std::vector<int64_t>& recv_counts, Device device) const {
  check_tensor("all_to_all", input, device);
  check_tensor("all_to_all", out, device);
  FT_CHECK(input.dtype() == out.dtype(), "all_to_all: input is ", dtype_name(input.dtype()), ", out ",
           dtype_name(out.dtype()));
  const auto total = [&](const std::vector<int64_t>& counts, const char* which) {
    FT_CHECK(static_cast<int>(counts.size()) == world_size(), "all_to_all: ", counts.size(), " ", which,
             " counts for a world of ", world_size());
    int64_t sum = 0;
    for (int64_t c : counts) {
      FT_CHECK(c >= 0, "all_to_all: a negative ", which, " count (", c, ")");
      sum += c;
    }
    return sum;
  };
  FT_CHECK(total(send_counts, "send") == input.numel(), "all_to_all: the send counts sum to ",
           total(send_counts, "send"), ", the input holds ", input.numel(), " elements");
  FT_CHECK(total(recv_counts, "receive") == out.numel(), "all_to_all: the receive counts sum to ",
           total(recv_counts, "receive"), ", out holds ", out.numel(), " elements");
}

void Communicator::check_wire(const char* collective, const Tensor& t, const Tensor& wire, Device device) {
  check_tensor(collective, t, device);
  check_tensor(collective, wire, device);
  FT_CHECK(wire.numel() == t.numel(), collective, ": the wire buffer holds ", wire.numel(), " elements, the tensor ",
           t.numel());
}

namespace {

/// A collective that was complete when it returned.
class DoneWork : public Work {
 public:
  void wait() override {}
};

/// t = t rounded to `via`'s dtype (through `via`, as many elements).
void round_through(const Tensor& t, const Tensor& via) {
  via.copy_(t);
  t.copy_(via);
}

}  // namespace

// The backends without a narrow path of their own (Gloo) round through the wire dtype on the host
// around a reduction in the tensor's own dtype: the values a rank contributes, and those it gets
// back, are what a narrow wire would carry.
std::unique_ptr<Work> Communicator::all_reduce_via(const Tensor& t, const Tensor& wire, CommOp op) {
  check_wire("all_reduce_via", t, wire, t.device());
  round_through(t, wire);
  all_reduce(t, op)->wait();
  round_through(t, wire);
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> Communicator::reduce_scatter_via(const Tensor& input, const Tensor& wire, const Tensor& out,
                                                       CommOp op) {
  check_wire("reduce_scatter_via", input, wire, input.device());
  round_through(input, wire);
  reduce_scatter(input, out, op)->wait();
  round_through(out, wire.narrow(0, 0, out.numel()));
  return std::make_unique<DoneWork>();
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
