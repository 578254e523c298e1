#include "train/distributed/collective_ops.h"

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/elementwise/elementwise.h"

namespace ft {

namespace {

/// Elements in one row of x (its first dim the rows).
int64_t row_elements(const Tensor& x) {
  int64_t n = 1;
  for (int64_t d = 1; d < x.dim(); ++d) n *= x.size(d);
  return n;
}

/// x's shape with `rows` rows.
Shape with_rows(const Tensor& x, int64_t rows) {
  Shape s = x.shape();
  s[0] = rows;
  return s;
}

/// Rows to elements: each count times the elements of a row.
std::vector<int64_t> elements(const std::vector<int64_t>& rows, int64_t per_row) {
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(r * per_row);
  return out;
}

/// A collective left in flight, holding its input: the caching allocator reuses freed memory in
/// the compute stream's order, and the communication stream may still be reading it until the
/// compute stream is ordered after the collective (wait()).
class WorkHoldingInput : public Work {
 public:
  WorkHoldingInput(std::unique_ptr<Work> work, Tensor input) : work_(std::move(work)), input_(std::move(input)) {}
  void wait() override {
    work_->wait();
    input_ = Tensor();
  }

 private:
  std::unique_ptr<Work> work_;
  Tensor input_;
};

/// Waits for `work`, or hands it, holding `input`, to the caller's `in_flight`.
void wait_or_keep(std::unique_ptr<Work> work, const Tensor& input, std::unique_ptr<Work>* in_flight) {
  if (in_flight)
    *in_flight = std::make_unique<WorkHoldingInput>(std::move(work), input);
  else
    work->wait();
}

Tensor exchange(Communicator& comm, const Tensor& x, const std::vector<int64_t>& send_rows,
                const std::vector<int64_t>& recv_rows, int64_t per_row, std::unique_ptr<Work>* in_flight = nullptr) {
  int64_t rows = 0;
  for (int64_t r : recv_rows) rows += r;
  Tensor out = Tensor::empty(with_rows(x, rows), x.dtype(), x.device());
  wait_or_keep(comm.all_to_all(x, elements(send_rows, per_row), out, elements(recv_rows, per_row)), x, in_flight);
  return out;
}

Tensor scaled(const Tensor& g, double scale) { return scale == 1.0 ? g : g * scale; }

}  // namespace

Tensor all_to_all_rows(Communicator& comm, const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, double grad_scale, std::unique_ptr<Work>* in_flight) {
  FT_CHECK(x.defined() && x.dim() >= 1, "all_to_all_rows: x must have a first dim of rows");
  const int64_t per_row = row_elements(x);
  Tensor out = exchange(comm, x, send_rows, recv_rows, per_row, in_flight);
  if (!needs_grad({&x})) return out;
  return record("all_to_all_rows", out, {x},
                [&comm, send_rows, recv_rows, per_row, grad_scale, label = comm.timing_label()](const Tensor& g) {
                  const Communicator::TimingLabel timed_as(comm, label);
                  return std::vector<Tensor>{scaled(exchange(comm, g, recv_rows, send_rows, per_row), grad_scale)};
                });
}

Tensor all_gather_rows(Communicator& comm, const Tensor& x) {
  FT_CHECK(x.defined() && x.dim() >= 1, "all_gather_rows: x must have a first dim of rows");
  Tensor out = Tensor::empty(with_rows(x, x.size(0) * comm.world_size()), x.dtype(), x.device());
  comm.all_gather(x.detach().reshape({x.numel()}), out.reshape({out.numel()}))->wait();
  return out;
}

Tensor reduce_scatter_rows(Communicator& comm, const Tensor& x, double grad_scale, std::unique_ptr<Work>* in_flight) {
  const int64_t world = comm.world_size();
  FT_CHECK(x.defined() && x.dim() >= 1 && x.size(0) % world == 0, "reduce_scatter_rows: x must have a first dim of ",
           "rows divisible by the world size ", world, ", got ", shape_str(x.shape()));
  Tensor out = Tensor::empty(with_rows(x, x.size(0) / world), x.dtype(), x.device());
  wait_or_keep(comm.reduce_scatter(x.detach().reshape({x.numel()}), out.reshape({out.numel()}), CommOp::Sum), x,
               in_flight);
  if (!needs_grad({&x})) return out;
  return record("reduce_scatter_rows", out, {x}, [&comm, grad_scale, label = comm.timing_label()](const Tensor& g) {
    const Communicator::TimingLabel timed_as(comm, label);
    return std::vector<Tensor>{scaled(all_gather_rows(comm, g), grad_scale)};
  });
}

}  // namespace ft
