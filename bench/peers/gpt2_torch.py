"""PyTorch peer for `ft-bench gpt2`: the same gpt2-124M step (B=16, T=1024, V=50304, fp32 master
weights with bf16 autocast, SDPA flash attention, fused AdamW lr 6e-4 betas 0.9/0.95 wd 0.1 on
2-D weights, clipping at 1.0) on random tokens, eager or torch.compile'd, each step timed with
CUDA events after a warm-up. Prints a RESULT line with the median ms, tok/s, MFU and peak
memory."""
import argparse
import statistics

import torch

from gpt2_model import GPT, init_gpt2_
from timing import time_steps


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--mode", default="compile", choices=["compile", "eager"])
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(50304, 1024, a.layers, 12, 768).cuda()
    init_gpt2_(model)
    decay = [p for p in model.p.values() if p.dim() >= 2]
    rest = [p for p in model.p.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=6e-4,
                            betas=(0.9, 0.95), eps=1e-8, fused=True)
    forward = torch.compile(model) if a.mode == "compile" else model
    ids = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times, loss = time_steps(step, a.warmup, a.steps, reset_peak_memory=True)
    ms = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    tok_per_s = a.batch * a.seq / (ms / 1e3)
    mfu = (6 * params + 6 * a.layers * 768 * a.seq) * tok_per_s / 989e12
    print(f"RESULT gpt2 torch={a.mode} ms={ms:.3f} tok_per_s={tok_per_s:.0f} mfu={mfu:.4f} "
          f"peak_gb={torch.cuda.max_memory_allocated() / 1e9:.3f} loss={loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
