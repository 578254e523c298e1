// CUDA graphs: capture of a step on the compute stream, instantiation with its memory checked,
// and replay with per-replay writes (lib/cuda/device_writes.h).
#include "lib/cuda/runtime.h"

#include <functional>
#include <string>
#include <vector>

#include "lib/cuda/device_writes.h"
#include "lib/runtime.h"

namespace ft {

namespace {
// The bytes the graph's allocation nodes ask for: what a launch must find free (at most; CUDA may
// reuse a freed block within the step).
size_t graph_allocation_bytes(cudaGraph_t graph) {
  size_t count = 0;
  FT_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  FT_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  size_t bytes = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FT_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemAlloc) continue;
    cudaMemAllocNodeParams params{};
    FT_CUDA_CHECK(cudaGraphMemAllocNodeGetParams(node, &params));
    bytes += params.bytesize;
  }
  return bytes;
}

// A graph's own allocations are made when it is instantiated, uploaded or launched, so a step
// that ran eagerly can still not fit replayed: out of memory there says how much the graph asks
// for; any other failure is a CUDA error.
void check_graph_memory(cudaError_t status, const char* doing, size_t allocated_bytes) {
  if (status == cudaSuccess) return;
  if (status != cudaErrorMemoryAllocation) FT_CUDA_CHECK(status);
  cuda::throw_out_of_memory(detail::concat("CUDA out of memory ", doing, " the captured step: its graph allocates up to ",
                                           runtime::gigabytes(static_cast<double>(allocated_bytes)), " of its own"),
                            __FILE__, __LINE__);
}
}  // namespace

CapturedGraph::CapturedGraph(const std::function<void()>& work, const DeviceWrites* per_replay) {
  cudaStream_t s = cuda::stream();
  FT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    if (per_replay) {
      cuda::launch_device_writes(*per_replay);
      // The node just captured is the stream's one dependency now: the handle replays re-point.
      cudaStreamCaptureStatus status{};
      const cudaGraphNode_t* dependencies = nullptr;
      size_t count = 0;
      FT_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &dependencies, nullptr, &count));
      FT_CHECK(count == 1, "CapturedGraph: expected the device-writes kernel as the one dependency, got ", count);
      writes_node_ = dependencies[0];
    }
    work();
  } catch (const std::exception& e) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported here, not left for the next call
    const std::string message = detail::concat("CapturedGraph: the work could not be captured: ", e.what());
    if (dynamic_cast<const OutOfMemory*>(&e)) throw OutOfMemory(message);
    FT_FAIL(message);
  }
  FT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  allocated_bytes_ = graph_allocation_bytes(graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    if (status == cudaErrorMemoryAllocation) check_graph_memory(status, "instantiating", allocated_bytes_);
    FT_FAIL("CapturedGraph: cudaGraphInstantiate failed: ", cudaGetErrorString(status));
  }
  // Uploaded now, so the first replay does not pay for it (and a timed step does not either).
  // The upload maps the graph's own memory, so it is the first place that can run out.
  const cudaError_t uploaded = cudaGraphUpload(exec, s);
  if (uploaded != cudaSuccess) {  // no destructor runs for a constructor that throws
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    check_graph_memory(uploaded, "uploading", allocated_bytes_);
  }
  graph_ = graph;
  exec_ = exec;
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CapturedGraph::replay() {
  const cudaError_t status = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda::stream());
  check_graph_memory(status, "launching", allocated_bytes_);
}

void CapturedGraph::replay(const DeviceWrites& per_replay) {
  FT_CHECK(writes_node_ != nullptr, "CapturedGraph::replay: this graph was captured without per-replay writes");
  cuda::set_device_writes(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaGraphNode_t>(writes_node_), per_replay);
  replay();
}

}  // namespace ft
