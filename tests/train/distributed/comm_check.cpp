// ft-comm-check [--device cuda]: run under scripts/launch.sh N, it checks every collective of the run's
// communicator against sums computed locally (each rank can draw every rank's inputs, since rank
// r's come from seed r), over sizes that do not divide by the world size, in f32 and f64. With
// --fault kill|stop the last rank kills or stops itself after --fault-after collectives, and the
// others must fail with an ft::Error naming it within --comm-timeout-ms (the ctest checks the
// message); a rank that hangs or crashes fails the test. On CUDA each rank first names its GPU
// (a device script checks that N ranks got N GPUs); --hold-ms keeps the ranks alive that long at
// the end, so that nvidia-smi can see which process holds which GPU. --bench-mb M times, instead,
// gradient-sized all-reduces: M MB of f32 in 25 MB buckets, with f32 and bf16 on the wire.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"
#include "lib/runtime.h"
#include "lib/tensor.h"
#include "train/distributed/communicator.h"

namespace {

using ft::CommOp;
using ft::Tensor;

/// Rank r's input of `n` values for collective number `call`: drawn from (r, call), so every
/// rank can build every other rank's.
std::vector<double> inputs_of(int rank, int call, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1) + static_cast<uint64_t>(call) * 7919u;
  for (double& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = static_cast<double>(x % 2001) / 1000.0 - 1.0;  // in [-1, 1], never all zero
  }
  return v;
}

ft::Device on_device = ft::kCPU;  // where the collectives' tensors live (--device)

Tensor to_tensor(const std::vector<double>& v, ft::DType dtype) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, ft::DType::F64).to(dtype).to(on_device);
}

int failures = 0;

void expect_close(const std::string& what, const Tensor& got, const std::vector<double>& want, double tol) {
  const Tensor g = got.to(ft::kCPU).to(ft::DType::F64);
  const double* p = g.data<double>();
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(p[i] - want[i]) > tol * (1.0 + std::fabs(want[i]))) {
      std::printf("FAIL %s: element %zu is %.17g, expected %.17g\n", what.c_str(), i, p[i], want[i]);
      ++failures;
      return;
    }
}

/// --bench-mb: the all-reduce of `mb` MB of f32 gradients in 25 MB buckets back to back, as a
/// data-parallel step issues them, with nothing else running; the median of 10 rounds after 3.
int bench(ft::Communicator& comm, double mb) {
  const int64_t total = static_cast<int64_t>(mb * (1 << 20) / 4), bucket = (int64_t{25} << 20) / 4;
  Tensor grads = to_tensor(inputs_of(comm.rank(), 0, total), ft::DType::F32);
  Tensor wire = Tensor::empty({total}, ft::DType::BF16, on_device);
  for (const bool narrow : {false, true}) {
    std::vector<double> ms;
    for (int round = 0; round < 13; ++round) {
      ft::synchronize();
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::unique_ptr<ft::Work>> works;
      for (int64_t at = 0; at < total; at += bucket) {
        const int64_t n = std::min(bucket, total - at);
        works.push_back(narrow ? comm.all_reduce_via(grads.narrow(0, at, n), wire.narrow(0, at, n), CommOp::Average)
                               : comm.all_reduce(grads.narrow(0, at, n), CommOp::Average));
      }
      for (auto& w : works) w->wait();
      ft::synchronize();  // the host clock is read only after the device is done
      if (round >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    // Bus bandwidth as NCCL's tests count it: each byte crosses 2 (N - 1) / N links' worth.
    const int world = comm.world_size();
    const double bytes = static_cast<double>(total) * (narrow ? 2 : 4);
    if (comm.rank() == 0)
      std::printf("RESULT allreduce mb=%.1f wire=%s world=%d ms=%.3f busbw_gbs=%.1f\n", mb, narrow ? "bf16" : "f32",
                  world, median, bytes * 2.0 * (world - 1) / world / (median * 1e6));
  }
  return 0;
}

struct Options {
  std::string fault;
  int fault_after = 3;
  int timeout_ms = 5000;
  int hold_ms = 0;
  double bench_mb = 0;
  ft::Device device = ft::kCPU;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) o.device = ft::Device::parse(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--fault")) o.fault = argv[i + 1];
    else if (!std::strcmp(argv[i], "--fault-after")) o.fault_after = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--comm-timeout-ms")) o.timeout_ms = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--hold-ms")) o.hold_ms = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--bench-mb")) o.bench_mb = std::atof(argv[i + 1]);
  }
  return o;
}

/// Collectives until the last rank kills or stops itself; the others must end with a clear error.
[[noreturn]] void run_until_a_rank_fails(ft::Communicator& comm, const Options& o) {
  const int rank = comm.rank(), world = comm.world_size();
  for (int step = 1;; ++step) {
    comm.set_step(step);
    if (rank == world - 1 && step > o.fault_after) {
      std::printf("rank %d: %s myself at step %d\n", rank, o.fault == "kill" ? "killing" : "stopping", step);
      std::fflush(stdout);
      raise(o.fault == "kill" ? SIGKILL : SIGSTOP);
    }
    Tensor t = to_tensor(inputs_of(rank, step, 1000), ft::DType::F32);
    comm.all_reduce(t, CommOp::Sum)->wait();
  }
}

/// all_reduce (sum, average), reduce_scatter, all_gather and broadcast of n elements in dtype,
/// each against the sums written out here.
void check_collectives(ft::Communicator& comm, ft::DType dtype, int64_t n, int& call) {
  const int rank = comm.rank(), world = comm.world_size();
  const double tol = dtype == ft::DType::F32 ? 1e-5 : 1e-12;
  const std::string tag = std::string(" ") + ft::dtype_name(dtype) + " n=" + std::to_string(n);
  for (CommOp op : {CommOp::Sum, CommOp::Average}) {
    ++call;
    std::vector<double> want(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < world; ++r) {
      const std::vector<double> v = inputs_of(r, call, n);
      for (size_t i = 0; i < want.size(); ++i) want[i] += v[i];
    }
    if (op == CommOp::Average)
      for (double& w : want) w /= world;
    Tensor t = to_tensor(inputs_of(rank, call, n), dtype);
    comm.all_reduce(t, op)->wait();
    expect_close((op == CommOp::Sum ? "all_reduce sum" : "all_reduce average") + tag, t, want, tol);
  }
  // reduce_scatter: [world * n] in, this rank's [n] slice of the sum out
  ++call;
  std::vector<double> want(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<double> v = inputs_of(r, call, n * world);
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += v[static_cast<size_t>(rank * n + i)];
  }
  Tensor out = Tensor::empty({n}, dtype, on_device);
  comm.reduce_scatter(to_tensor(inputs_of(rank, call, n * world), dtype), out, CommOp::Sum)->wait();
  expect_close("reduce_scatter" + tag, out, want, tol);
  ++call;
  std::vector<double> gathered;
  for (int r = 0; r < world; ++r) {
    const std::vector<double> v = inputs_of(r, call, n);
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  Tensor all = Tensor::empty({n * world}, dtype, on_device);
  comm.all_gather(to_tensor(inputs_of(rank, call, n), dtype), all)->wait();
  expect_close("all_gather" + tag, all, to_tensor(gathered, dtype).to_vector(), 0);
  // broadcast from the last rank
  ++call;
  Tensor b = to_tensor(inputs_of(rank, call, n), dtype);
  comm.broadcast(b, world - 1)->wait();
  expect_close("broadcast" + tag, b, to_tensor(inputs_of(world - 1, call, n), dtype).to_vector(), 0);
}

/// Through a bf16 wire: each rank's values rounded to bf16, reduced, the result rounded again
/// (summed in bf16 by NCCL, in f32 on Gloo: a bf16 ulp apart at most for 2 to 4 ranks).
void check_bf16_wire(ft::Communicator& comm, int64_t n, int& call) {
  const int rank = comm.rank(), world = comm.world_size();
  const std::string size = " n=" + std::to_string(n);
  ++call;
  std::vector<double> want(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<double> v = to_tensor(inputs_of(r, call, n), ft::DType::BF16).to(ft::kCPU).to_vector();
    for (size_t i = 0; i < want.size(); ++i) want[i] += v[i] / world;
  }
  Tensor t = to_tensor(inputs_of(rank, call, n), ft::DType::F32);
  Tensor wire = Tensor::empty({n}, ft::DType::BF16, on_device);
  comm.all_reduce_via(t, wire, CommOp::Average)->wait();
  expect_close("all_reduce_via bf16" + size, t, want, 2e-2);
  ++call;
  std::vector<double> slice(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<double> v = to_tensor(inputs_of(r, call, n * world), ft::DType::BF16).to(ft::kCPU).to_vector();
    for (int64_t i = 0; i < n; ++i) slice[static_cast<size_t>(i)] += v[static_cast<size_t>(rank * n + i)] / world;
  }
  Tensor out = Tensor::empty({n}, ft::DType::F32, on_device);
  Tensor wide = Tensor::empty({n * world}, ft::DType::BF16, on_device);
  comm.reduce_scatter_via(to_tensor(inputs_of(rank, call, n * world), ft::DType::F32), wide, out, CommOp::Average)
      ->wait();
  expect_close("reduce_scatter_via bf16" + size, out, slice, 2e-2);
}

/// all_to_all with uneven counts (rank s sends (s + 2d) % 4 · scale elements to rank d: some
/// zero), in i32 and f32: each rank's received slices are the slices its peers drew for it.
void check_all_to_all(ft::Communicator& comm, ft::DType dtype, int64_t scale, int& call) {
  const int rank = comm.rank(), world = comm.world_size();
  const auto count = [&](int from, int to) { return static_cast<int64_t>((from + 2 * to) % 4) * scale; };
  ++call;
  std::vector<int64_t> send_counts, recv_counts;
  int64_t send_total = 0;
  for (int d = 0; d < world; ++d) {
    send_counts.push_back(count(rank, d));
    recv_counts.push_back(count(d, rank));
    send_total += send_counts.back();
  }
  std::vector<double> want;
  for (int s = 0; s < world; ++s) {
    int64_t total = 0, before = 0;
    for (int d = 0; d < world; ++d) total += count(s, d);
    for (int d = 0; d < rank; ++d) before += count(s, d);
    const std::vector<double> theirs = inputs_of(s, call, total);
    want.insert(want.end(), theirs.begin() + before, theirs.begin() + before + count(s, rank));
  }
  // i32 carries the values times 1000 (whole numbers, as ids are).
  const auto values = [&](std::vector<double> v) {
    if (dtype == ft::DType::I32)
      for (double& x : v) x = std::round(x * 1000);
    return v;
  };
  Tensor out = Tensor::empty({static_cast<int64_t>(want.size())}, dtype, on_device);
  const auto in_dtype = [&](const std::vector<double>& v) {
    return Tensor::from_vector(values(v), {static_cast<int64_t>(v.size())}, ft::DType::F64).to(dtype);
  };
  comm.all_to_all(in_dtype(inputs_of(rank, call, send_total)).to(on_device), send_counts, out, recv_counts)->wait();
  expect_close(std::string("all_to_all ") + ft::dtype_name(dtype) + " x" + std::to_string(scale), out,
               in_dtype(want).to_vector(), 0);
}

/// Several collectives in flight at once complete in order.
void check_in_flight(ft::Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  std::vector<Tensor> many;
  std::vector<std::unique_ptr<ft::Work>> works;
  for (int k = 0; k < 8; ++k) {
    many.push_back(to_tensor(std::vector<double>(64, rank + k), ft::DType::F64));
    works.push_back(comm.all_reduce(many.back(), CommOp::Sum));
  }
  for (int k = 0; k < 8; ++k) {
    works[static_cast<size_t>(k)]->wait();
    expect_close("in flight " + std::to_string(k), many[static_cast<size_t>(k)],
                 std::vector<double>(64, world * (world - 1) / 2.0 + world * k), 0);
  }
}

/// On CUDA, the timing of a region's collectives by label: a collective the computation waits
/// for at once is exposed, one left in flight behind 3 ms of computation is hidden, and each is
/// counted under the label it was enqueued under. Gloo does not time: no figures.
void check_timing(ft::Communicator& comm) {
  // On CUDA 256 MB of f32: long enough to time apart from launches.
  const int64_t n = on_device.is_cuda() ? int64_t{64} << 20 : 1024;
  Tensor exposed = Tensor::full({n}, 1.0, ft::DType::F32, on_device);
  Tensor hidden = Tensor::full({n}, 1.0, ft::DType::F32, on_device), busy = Tensor::full({n}, 1.0, ft::DType::F32, on_device);
  comm.begin_timed_region();
  {
    const ft::Communicator::TimingLabel label(comm, "exposed");
    comm.all_reduce(exposed, CommOp::Sum)->wait();
  }
  std::unique_ptr<ft::Work> in_flight = comm.all_reduce(hidden, CommOp::Sum);
  for (int k = 0; k < 20; ++k) busy = busy * 1.0001;
  in_flight->wait();
  comm.end_timed_region();
  const std::map<std::string, ft::CommTiming> timing = comm.last_timing();
  auto fail = [](const std::string& what) {
    std::printf("FAIL timing: %s\n", what.c_str());
    ++failures;
  };
  if (!comm.timing_label().empty()) fail("the label did not return to \"\" after its scope");
  if (!on_device.is_cuda()) {
    if (!timing.empty()) fail("a backend that cannot time gave figures");
    return;
  }
  if (timing.size() != 2 || !timing.contains("exposed") || !timing.contains("")) {
    fail("expected the labels \"exposed\" and \"\", got " + std::to_string(timing.size()) + " labels");
    return;
  }
  const ft::CommTiming& e = timing.at("exposed");
  const ft::CommTiming& h = timing.at("");
  std::printf("timing: waited at once %d collective, %.3f ms, %.0f%% hidden; in flight behind computation %d, "
              "%.3f ms, %.0f%% hidden\n", e.collectives, e.busy_ms, 100 * e.hidden(), h.collectives, h.busy_ms,
              100 * h.hidden());
  if (e.collectives != 1 || h.collectives != 1) fail("each label should count one collective");
  if (!(e.busy_ms > 0 && h.busy_ms > 0)) fail("a collective took no time");
  if (!(e.hidden() < 0.5)) fail("a collective waited for at once should be exposed");
  if (!(h.hidden() > 0.9)) fail("a collective in flight behind 3 ms of computation should be hidden");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const ft::LaunchEnv env = ft::launch_env();
    on_device = o.device;
    auto comm = ft::make_communicator(env, o.device, {.timeout = std::chrono::milliseconds(o.timeout_ms)});
    const int rank = comm->rank(), world = comm->world_size();
    if (o.device.is_cuda()) {
      std::printf("rank %d of %d: GPU %s\n", rank, world, ft::device_identity().c_str());
      std::fflush(stdout);
    }
    if (o.bench_mb > 0) return bench(*comm, o.bench_mb);
    if (!o.fault.empty()) run_until_a_rank_fails(*comm, o);
    int call = 0;
    for (ft::DType dtype : {ft::DType::F32, ft::DType::F64})
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) check_collectives(*comm, dtype, n, call);
    for (int64_t n : {int64_t{7}, int64_t{100003}}) check_bf16_wire(*comm, n, call);
    for (ft::DType dtype : {ft::DType::I32, ft::DType::F32})
      for (int64_t scale : {int64_t{1}, int64_t{3001}}) check_all_to_all(*comm, dtype, scale, call);
    check_in_flight(*comm);
    check_timing(*comm);
    comm->barrier()->wait();
    if (o.device.is_cuda()) ft::synchronize();
    std::printf("rank %d of %d (%s): %s\n", rank, world, comm->backend().c_str(),
                failures ? "collectives FAILED" : "all collectives match");
    std::fflush(stdout);
    if (o.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
    return failures ? 1 : 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
