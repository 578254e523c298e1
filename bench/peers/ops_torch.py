"""PyTorch eager peer for `ft-bench ops`: the same ops, shapes and dtype (bf16), forward +
backward, timed with CUDA events after a warm-up; prints one RESULT line per op. Gradients
are taken with torch.autograd.grad, as ft-bench takes them with ft::gradients: no copies into
leaves' .grad. --json writes the medians for scripts/plot.py: each op under its printed name,
variant "torch eager" (residual+layernorm also "torch eager composite", the twin's own op sequence
written in PyTorch primitives); attention as "attention HS{hs}" (forward + backward), variants "torch sdpa"
and "torch eager"."""
import argparse

import torch
import torch.nn.functional as F

from results import add_json_argument, device_name, write_results
from timing import median_ms


def leaf(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--channels", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--only", default="", help="ops or attention (default: both)")
    add_json_argument(parser)
    a = parser.parse_args()
    n, c, v = a.rows, a.channels, a.vocab
    torch.manual_seed(0)

    x, r, w, b = leaf(n, c), leaf(n, c), leaf(c), leaf(c)
    dy = torch.randn(n, c, device="cuda", dtype=torch.bfloat16)

    def ln():
        torch.autograd.grad(F.layer_norm(x + r, (c,), w, b), (x, r, w, b), dy)

    def ln_composite():
        # The twin's own op sequence (lib/ops/norm/layer_norm.cpp's composite): layer norm written in
        # primitives, in f32, as a user without F.layer_norm would write it.
        s = (x + r).float()
        centered = s - s.mean(-1, keepdim=True)
        var = (centered * centered).mean(-1, keepdim=True)
        y = centered * torch.rsqrt(var + 1e-5) * w.float() + b.float()
        torch.autograd.grad(y.to(torch.bfloat16), (x, r, w, b), dy)

    x4, b4 = leaf(n, 4 * c), leaf(4 * c)
    dy4 = torch.randn(n, 4 * c, device="cuda", dtype=torch.bfloat16)

    def gelu():
        torch.autograd.grad(F.gelu(x4 + b4, approximate="tanh"), (x4, b4), dy4)

    def dropout():
        torch.autograd.grad(r + F.dropout(x + b, p=0.1, training=True), (x, r, b), dy)

    logits = leaf(n, v)
    targets = (torch.arange(n, device="cuda") * 7919) % v

    def ce():
        torch.autograd.grad(F.cross_entropy(logits, targets), (logits,))

    def ce_autocast():
        # What a bf16 training step runs (autocast puts cross_entropy in f32): the twin's math,
        # f32 log-probabilities; the plain call above keeps them in bf16.
        with torch.autocast("cuda", dtype=torch.bfloat16):
            torch.autograd.grad(F.cross_entropy(logits, targets), (logits,))

    results = []
    if a.only in ("", "ops"):
        for name, work in [("residual+layernorm", ln), ("bias+gelu (4C)", gelu), ("bias+dropout+residual", dropout),
                           (f"cross-entropy V={v}", ce)]:
            ms = median_ms(work, a.warmup, a.iterations)
            print(f"RESULT op={name} torch_eager_ms={ms:.4f}", flush=True)
            results.append({"workload": name, "variant": "torch eager", "ms": ms})
        ms = median_ms(ln_composite, a.warmup, a.iterations)
        print(f"RESULT op=residual+layernorm composite torch_eager_ms={ms:.4f}", flush=True)
        results.append({"workload": "residual+layernorm", "variant": "torch eager composite", "ms": ms})
        ms = median_ms(ce_autocast, a.warmup, a.iterations)
        print(f"RESULT op=cross-entropy V={v} autocast torch_eager_ms={ms:.4f}", flush=True)
        results.append({"workload": f"cross-entropy V={v}", "variant": "torch eager autocast", "ms": ms})
    if a.only in ("", "attention"):
        results += attention(a)
    if a.json:
        write_results(a.json, device_name(), results)


def attention(a):
    """Causal attention at ft-bench's shapes: SDPA (PyTorch's flash kernel) and the eager
    composition, forward and forward + backward, with TFLOP/s counted as docs/workloads.md does.
    Returns the results for --json: forward + backward ms, with the forward's as fwd_ms."""
    results = []
    for heads, hs in ((12, 64), (6, 128)):
        b, t = 16, 1024
        q, k, vv = leaf(b, heads, t, hs), leaf(b, heads, t, hs), leaf(b, heads, t, hs)
        dy = torch.randn(b, heads, t, hs, device="cuda", dtype=torch.bfloat16)
        mask = torch.ones(t, t, device="cuda", dtype=torch.bool).tril()

        def sdpa():
            return F.scaled_dot_product_attention(q, k, vv, is_causal=True)

        def eager():
            s = (q @ k.transpose(-1, -2)).float() * hs ** -0.5
            return (s.masked_fill(~mask, float("-inf")).softmax(-1).to(q.dtype)) @ vv

        flops = 4.0 * b * heads * t * t * hs / 2
        for name, f in (("sdpa", sdpa), ("eager", eager)):
            # Each timed step runs the work `repeat` times back to back, so the GPU time per call
            # leaves out the host's dispatch between calls: a 0.07 ms forward timed alone once
            # measured 0.29 ms (HS 128, 2026-11-26), the GPU idle while the host dispatched.
            repeat = 10

            def fwd():
                with torch.no_grad():
                    for _ in range(repeat):
                        f()

            def both():
                for _ in range(repeat):
                    torch.autograd.grad(f(), (q, k, vv), dy)

            fwd_ms = median_ms(fwd, a.warmup, a.iterations) / repeat
            total_ms = median_ms(both, a.warmup, a.iterations) / repeat
            print(f"RESULT attention=HS{hs} torch={name} fwd_ms={fwd_ms:.4f} total_ms={total_ms:.4f} "
                  f"fwd_tflops={flops / fwd_ms / 1e9:.1f} bwd_tflops={2.5 * flops / (total_ms - fwd_ms) / 1e9:.1f}",
                  flush=True)
            results.append({"workload": f"attention HS{hs}", "variant": f"torch {name}", "ms": total_ms,
                            "fwd_ms": fwd_ms})
    return results


if __name__ == "__main__":
    main()
