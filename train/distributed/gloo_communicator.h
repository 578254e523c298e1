// The Gloo backend (CPU tensors): Debian's libgloo over TCP. The ranks meet through a FileStore
// in a shared folder (or a Redis server across hosts), then run Gloo's collectives on one worker
// thread per process, so that calls return at once and keep their order. reduce_scatter is
// Gloo's all-reduce followed by taking this rank's slice: Gloo has no reduce-scatter for
// arbitrary sizes and ranks, and this backend exists for correctness (CI), not speed.
//
// Faults: every collective has the timeout; a peer that died closes its sockets and fails the
// collective at once. Each rank also touches a heartbeat file in the rendezvous folder every
// second, so that the error can name the rank that stopped answering (a stopped process's
// heartbeat stops with it).
#pragma once
#include <memory>

#include "train/distributed/communicator.h"

namespace ft {

/// Joins the run described by `env` (all world_size ranks must call it).
std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, const CommOptions& options);

}  // namespace ft
