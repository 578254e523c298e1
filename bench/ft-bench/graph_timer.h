// Times a piece of device work two ways, both with CUDA events after a warm-up:
// eager (each call enqueued by the host, launch gaps included) and replayed from a CUDA graph
// captured once (kernel time without host gaps). The work must free whatever it allocates
// before it returns, so the captured graph can be replayed.
#pragma once
#include <functional>

namespace ft::bench {

struct Timing {
  double eager_ms = 0;  // median over iterations
  double graph_ms = 0;  // median over replays; 0 when capture failed
  double batched_graph_ms = 0;  // with batched > 1: a graph of `batched` calls, median / batched
};

/// Runs `work` warmup times, then times `iterations` eager calls and `iterations` replays. With
/// batched > 1, also a graph of that many calls in a row, whose replay's median is divided by
/// it: the cost of the work inside a larger graph (a training step's), without the fixed cost of
/// launching a graph and of its first and last kernel that one call a replay pays in full.
Timing time_device_work(const std::function<void()>& work, int warmup, int iterations, int batched = 1);

}  // namespace ft::bench
