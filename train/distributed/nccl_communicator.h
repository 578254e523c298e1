// The NCCL backend (CUDA tensors). NCCL bootstraps from NCCL_COMM_ID = MASTER_ADDR:MASTER_PORT
// (set from the launch environment when the launcher did not): rank 0 hosts the bootstrap there,
// so no id is exchanged by hand. Collectives run on a communication stream of their own: each
// waits for an event recorded on the compute stream when it is called, and its Work makes the
// compute stream wait for its end (no host synchronization), so it overlaps whatever compute is
// enqueued between the call and the wait, and the pattern is capturable in a CUDA graph.
#pragma once
#include <memory>

#include "train/distributed/communicator.h"

namespace ft {

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, Device device, const CommOptions& options);

}  // namespace ft
