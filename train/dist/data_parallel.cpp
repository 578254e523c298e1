#include "train/dist/data_parallel.h"

#include <memory>
#include <vector>

#include "lib/autograd.h"

namespace ft {

DataParallel::DataParallel(Communicator& comm, Optimizer& optimizer) : comm_(comm), optimizer_(optimizer) {}

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
  std::vector<std::unique_ptr<Work>> pending;
  for (const Tensor& flat : optimizer_.grad_buffer().flats()) pending.push_back(comm_.all_reduce(flat, CommOp::Average));
  for (auto& work : pending) work->wait();
}

}  // namespace ft
