#include "train/dist/data_parallel.h"

#include <cstring>
#include <memory>
#include <vector>

#include "lib/autograd.h"
#include "lib/error.h"

namespace ft {

DataParallel::DataParallel(Communicator& comm, Optimizer& optimizer, Options options)
    : comm_(comm), optimizer_(optimizer), options_(options) {}

void DataParallel::broadcast_parameters(Module& model) {
  NoGradGuard no_grad;
  std::vector<std::unique_ptr<Work>> pending;
  // The masters first (a bf16 parameter's f32 master is what the optimizer updates), then every
  // tensor of the state dict: parameters, frozen ones and buffers.
  for (const Tensor& master : optimizer_.master_buffers()) pending.push_back(comm_.broadcast(master, 0));
  for (const auto& [name, tensor] : model.state_dict()) pending.push_back(comm_.broadcast(tensor, 0));
  for (auto& work : pending) work->wait();
}

void DataParallel::average_gradients() {
  if (options_.check_replicas) check_replicas();
  std::vector<std::unique_ptr<Work>> pending;
  for (const Tensor& flat : optimizer_.grad_buffer().flats()) pending.push_back(comm_.all_reduce(flat, CommOp::Average));
  for (auto& work : pending) work->wait();
}

void DataParallel::check_replicas() {
  NoGradGuard no_grad;
  const std::vector<Tensor>& masters = optimizer_.master_buffers();
  for (size_t g = 0; g < masters.size(); ++g) {
    Tensor theirs = Tensor::empty(masters[g].shape(), masters[g].dtype(), masters[g].device());
    theirs.copy_(masters[g]);
    comm_.broadcast(theirs, 0)->wait();
    const Tensor mine = masters[g].to(kCPU), ref = theirs.to(kCPU);
    const size_t bytes = dtype_size(mine.dtype());
    const auto* a = static_cast<const unsigned char*>(mine.data_ptr());
    const auto* b = static_cast<const unsigned char*>(ref.data_ptr());
    for (int64_t i = 0; i < mine.numel(); ++i)
      FT_CHECK(std::memcmp(a + i * bytes, b + i * bytes, bytes) == 0, "data parallel: at step ", comm_.step(),
               " rank ", comm_.rank(), "'s master weight ", i, " of group ", g, " (", mine.to_vector()[i],
               ") differs from rank 0's (", ref.to_vector()[i], "): the replicas have diverged");
  }
}

}  // namespace ft
