#include "bench/ft-bench/graph_timer.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "lib/cuda/runtime.h"
#include "train/loop/step_timer.h"

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

/// The median replay time of a graph of `calls` consecutive calls of work; 0, with a note, when
/// it cannot be captured.
double graph_replay_ms(const std::function<void()>& work, int calls, int iterations) {
  // Owned from capture on, so an error while instantiating or replaying frees them too.
  std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> graph(nullptr, cudaGraphDestroy);
  std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> exec(nullptr, cudaGraphExecDestroy);
  FT_CUDA_CHECK(cudaStreamBeginCapture(cuda::stream(), cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < calls; ++i) work();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(cuda::stream(), &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    std::fprintf(stderr, "note: capturing %d call(s) in one graph failed; that graph time is not measured\n", calls);
    return 0;
  }
  cudaGraph_t captured = nullptr;
  FT_CUDA_CHECK(cudaStreamEndCapture(cuda::stream(), &captured));
  graph.reset(captured);
  cudaGraphExec_t instance = nullptr;
  FT_CUDA_CHECK(cudaGraphInstantiate(&instance, graph.get(), 0));
  exec.reset(instance);
  FT_CUDA_CHECK(cudaGraphLaunch(exec.get(), cuda::stream()));  // first replay uploads the graph
  const double ms = median_of_events([&] { FT_CUDA_CHECK(cudaGraphLaunch(exec.get(), cuda::stream())); }, iterations);
  cuda::check_device_errors();
  return ms;
}

}  // namespace

Timing time_device_work(const std::function<void()>& work, int warmup, int iterations, int batched) {
  for (int i = 0; i < warmup; ++i) work();
  cuda::check_device_errors();
  Timing t;
  t.eager_ms = median_of_events(work, iterations);
  t.graph_ms = graph_replay_ms(work, 1, iterations);
  if (batched > 1 && t.graph_ms > 0) {
    try {  // an extra figure: without it the rest still stands
      t.batched_graph_ms = graph_replay_ms(work, batched, iterations) / batched;
    } catch (const Error& e) {
      std::fprintf(stderr, "note: %d calls in one graph not measured: %s\n", batched, e.what());
    }
  }
  return t;
}

}  // namespace ft::bench
