#include "examples/bench/graph_timer.h"

#include <cstdio>
#include <vector>

#include "lib/cuda/runtime.h"
#include "train/step_timer.h"

namespace ft::bench {

namespace {

double median_of_events(const std::function<void()>& body, int iterations) {
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events(static_cast<size_t>(iterations));
  for (auto& [a, b] : events) {
    FT_CUDA_CHECK(cudaEventCreate(&a));
    FT_CUDA_CHECK(cudaEventCreate(&b));
  }
  for (auto& [a, b] : events) {
    FT_CUDA_CHECK(cudaEventRecord(a, cuda::stream()));
    body();
    FT_CUDA_CHECK(cudaEventRecord(b, cuda::stream()));
  }
  std::vector<double> ms;
  for (auto& [a, b] : events) {
    FT_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  return median(ms);
}

/// The median replay time of a graph of `calls` consecutive calls of work; 0 when capture failed.
double graph_replay_ms(const std::function<void()>& work, int calls, int iterations) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FT_CUDA_CHECK(cudaStreamBeginCapture(cuda::stream(), cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < calls; ++i) work();
  } catch (...) {
    cudaStreamEndCapture(cuda::stream(), &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    std::fprintf(stderr, "note: capture failed; graph time not measured\n");
    return 0;
  }
  FT_CUDA_CHECK(cudaStreamEndCapture(cuda::stream(), &graph));
  FT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  FT_CUDA_CHECK(cudaGraphLaunch(exec, cuda::stream()));  // first replay uploads the graph
  const double ms = median_of_events([&] { FT_CUDA_CHECK(cudaGraphLaunch(exec, cuda::stream())); }, iterations);
  cuda::check_device_errors();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

}  // namespace

Timing time_device_work(const std::function<void()>& work, int warmup, int iterations, int batched) {
  for (int i = 0; i < warmup; ++i) work();
  cuda::check_device_errors();
  Timing t;
  t.eager_ms = median_of_events(work, iterations);
  t.graph_ms = graph_replay_ms(work, 1, iterations);
  if (batched > 1 && t.graph_ms > 0) t.batched_graph_ms = graph_replay_ms(work, batched, iterations) / batched;
  return t;
}

}  // namespace ft::bench
