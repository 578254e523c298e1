"""PyTorch eager peer for `ft-bench ops`: the same ops, shapes and dtype (bf16), forward +
backward, timed with CUDA events after a warm-up; prints one RESULT line per op."""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_ms(work, warmup, iterations):
    for _ in range(warmup):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times)


def leaf(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--channels", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    a = parser.parse_args()
    n, c, v = a.rows, a.channels, a.vocab
    torch.manual_seed(0)

    x, r, w, b = leaf(n, c), leaf(n, c), leaf(c), leaf(c)
    dy = torch.randn(n, c, device="cuda", dtype=torch.bfloat16)

    def ln():
        s = x + r
        F.layer_norm(s, (c,), w, b).backward(dy)
        for t in (x, r, w, b):
            t.grad = None

    x4, b4 = leaf(n, 4 * c), leaf(4 * c)
    dy4 = torch.randn(n, 4 * c, device="cuda", dtype=torch.bfloat16)

    def gelu():
        F.gelu(x4 + b4, approximate="tanh").backward(dy4)
        x4.grad = b4.grad = None

    def dropout():
        (r + F.dropout(x + b, p=0.1, training=True)).backward(dy)
        for t in (x, r, b):
            t.grad = None

    logits = leaf(n, v)
    targets = (torch.arange(n, device="cuda") * 7919) % v

    def ce():
        F.cross_entropy(logits, targets).backward()
        logits.grad = None

    for name, work in [("residual+layernorm", ln), ("bias+gelu (4C)", gelu), ("bias+dropout+residual", dropout),
                       (f"cross-entropy V={v}", ce)]:
        print(f"RESULT op={name} torch_eager_ms={time_ms(work, a.warmup, a.iterations):.4f}", flush=True)


if __name__ == "__main__":
    main()
