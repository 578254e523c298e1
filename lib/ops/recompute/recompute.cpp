#include "lib/ops/recompute/recompute.h"

#include <memory>
#include <optional>

#include "lib/autograd.h"
#include "lib/error.h"
#include "lib/ops/matmul/matmul.h"
#include "lib/ops/random/random.h"

namespace ft {

Recompute parse_recompute(const std::string& name, const std::string& who) {
  if (name == "none") return Recompute::None;
  if (name == "block") return Recompute::Block;
  FT_CHECK(name == "selective", who, ": --recompute must be none, block or selective, got '", name, "'");
  return Recompute::Selective;
}

Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                 const std::vector<Tensor>& parameters, Recompute how) {
  check_defined(x, "recompute", "x");
  bool trains = x.requires_grad();
  for (const Tensor& p : parameters) trains = trains || (p.defined() && p.requires_grad());
  if (!grad_mode_enabled() || !trains || how == Recompute::None) return fn(x);
  const Tensor draws = PhiloxCounter::on(x.device()).snapshot();  // where fn's random numbers start
  // The products the second run takes instead of computing (Selective), kept by the node.
  auto kept = std::make_shared<MatmulStash::Outputs>();
  Tensor y;
  {
    NoGradGuard first_run;
    std::optional<MatmulStash> saving;
    if (how == Recompute::Selective) saving.emplace(*kept, MatmulStash::Mode::Save);
    y = fn(x);
  }
  FT_CHECK(y.defined(), "recompute: the function returned an undefined tensor");
  const bool want_x = x.requires_grad();
  return record_opaque("recompute", y, {x}, [fn, saved = x.detach(), draws, want_x, kept, how](const Tensor& g) {
    PhiloxCounter& counter = PhiloxCounter::on(saved.device());
    const Tensor after_forward = counter.snapshot();
    counter.restore(draws);
    Tensor input = saved.detach();
    if (want_x) input.requires_grad_(true);
    Tensor again;
    {
      EnableGradGuard second_run;
      std::optional<MatmulStash> replaying;
      if (how == Recompute::Selective) replaying.emplace(*kept, MatmulStash::Mode::Replay);
      again = fn(input);
    }
    counter.restore(after_forward);
    if (again.requires_grad()) run_backward(again, g, /*retain_graph=*/false);
    return std::vector<Tensor>{want_x ? input.grad() : Tensor()};
  });
}

}  // namespace ft
