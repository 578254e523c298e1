// Collectives as differentiable ops, for model parallelism: each forward runs a collective and
// waits for it (on NCCL the compute stream waits, the host does not), and records an autograd
// node whose backward runs the transposed collective. Every rank must run the same ops in the
// same order, forward and backward, as with any collective.
//
// A backward's collective is timed under the timing label its forward ran under
// (Communicator::TimingLabel). The backward scales the gradient by grad_scale: with each rank's loss the mean over its own
// samples, 1 / W turns the gradients into those of the global batch's mean.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "lib/tensor.h"
#include "train/distributed/communicator.h"

namespace ft {

/// x [n, ...]: its first send_rows[0] rows go to rank 0, the next send_rows[1] to rank 1, and so
/// on; the result [Σ recv_rows, ...] holds recv_rows[s] rows from each rank s, in rank order.
/// Backward: the gradient goes back the same way, times grad_scale.
/// With `in_flight`, the forward's collective is left running there instead of waited for: the
/// caller enqueues other work, then waits on it before anything reads the result.
Tensor all_to_all_rows(Communicator& comm, const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, double grad_scale,
                       std::unique_ptr<Work>* in_flight = nullptr);

/// x [W·n, ...] on every rank: the sum over the ranks of their slice [rank·n, (rank + 1)·n), [n, ...].
/// Backward: every rank's gradient gathered, [W·n, ...], times grad_scale. `in_flight` as above.
Tensor reduce_scatter_rows(Communicator& comm, const Tensor& x, double grad_scale,
                           std::unique_ptr<Work>* in_flight = nullptr);

/// x [n, ...] on every rank: [W·n, ...], every rank's x in rank order. No gradient.
Tensor all_gather_rows(Communicator& comm, const Tensor& x);

}  // namespace ft
