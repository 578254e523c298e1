"""PyTorch peer of the `adamw-gpt2` benchmark: one AdamW step over the 148 fp32 parameter tensors
of gpt2-124M (vocab padded to 50304) with random fp32 gradients, for torch.optim.AdamW with
fused=True, with foreach=True and with neither (the per-tensor for-loop). Each opt.step() is timed
with CUDA events after a warm-up; prints the medians on one RESULT line, then each step's share of
the copy bandwidth; --json writes them for scripts/plot.py (variants "torch fused", "torch foreach",
"torch for-loop")."""
import argparse
import sys

import torch

from results import add_json_argument, device_name, write_results
from timing import median_ms

# The fewest bytes a step moves per parameter: read grad, param, m, v and write param, m, v (fp32).
BYTES_PER_PARAM = 7 * 4


def gpt2_shapes(vocab, context, channels, layers):
    """The parameter shapes of gpt2-124M in model order (Linear weights as [in, out], as GPT-2's
    Conv1D stores them; only the element counts matter here)."""
    c = channels
    shapes = [(vocab, c), (context, c)]
    for _ in range(layers):
        shapes += [(c,), (c,),                # ln_1 weight, bias
                   (c, 3 * c), (3 * c,),      # attn.c_attn
                   (c, c), (c,),              # attn.c_proj
                   (c,), (c,),                # ln_2 weight, bias
                   (c, 4 * c), (4 * c,),      # mlp.c_fc
                   (4 * c, c), (c,)]          # mlp.c_proj
    shapes += [(c,), (c,)]                    # ln_f weight, bias
    return shapes


def time_adamw_step(shapes, warmup, iterations, **impl):
    """Median ms of opt.step() on a fresh parameter set with fixed random gradients; `impl` picks
    the implementation (fused=True, foreach=True, or foreach=False and fused=False). The set is freed
    before returning, so no two variants hold memory at the same time."""
    params = [torch.randn(s, device="cuda", dtype=torch.float32, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, **impl)
    ms = median_ms(opt.step, warmup, iterations)
    del opt, params
    torch.cuda.empty_cache()
    return ms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--channels", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--peak-tbps", type=float, default=3.0,
                        help="copy bandwidth of the GPU in TB/s (3.00 measured on the H100, docs/history/performance-log.md)")
    add_json_argument(parser)
    a = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("adamw_torch.py: CUDA is not available; this benchmark needs a GPU")
    torch.manual_seed(0)

    shapes = gpt2_shapes(a.vocab, a.context, a.channels, a.layers)
    numel = sum(torch.Size(s).numel() for s in shapes)
    fused_ms = time_adamw_step(shapes, a.warmup, a.iterations, fused=True)
    foreach_ms = time_adamw_step(shapes, a.warmup, a.iterations, foreach=True)
    forloop_ms = time_adamw_step(shapes, a.warmup, a.iterations, foreach=False, fused=False)
    # New keys go at the end: the device suites ops and profile read this line.
    print(f"RESULT op=adamw-gpt2 torch_fused_ms={fused_ms:.4f} torch_foreach_ms={foreach_ms:.4f} "
          f"params={numel} tensors={len(shapes)} torch_forloop_ms={forloop_ms:.4f}", flush=True)
    moved_gb = numel * BYTES_PER_PARAM / 1e9
    variants = [("fused", fused_ms), ("foreach", foreach_ms), ("for-loop", forloop_ms)]
    for name, ms in variants:
        tbps = moved_gb / ms  # GB/ms = TB/s
        print(f"{name}: {moved_gb:.3f} GB moved in {ms:.4f} ms = {tbps:.3f} TB/s, "
              f"{100 * tbps / a.peak_tbps:.1f}% of {a.peak_tbps} TB/s", flush=True)
    if a.json:
        write_results(a.json, device_name(),
                      [{"workload": "adamw-gpt2", "variant": f"torch {name}", "ms": ms} for name, ms in variants])


if __name__ == "__main__":
    main()
