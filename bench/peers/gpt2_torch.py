"""PyTorch peer for `ft-bench gpt2`: the same gpt2-124M step (B=16, T=1024, V=50304, fp32 master
weights with bf16 autocast, SDPA flash attention, fused AdamW lr 6e-4 betas 0.9/0.95 wd 0.1 on
2-D weights, clipping at 1.0) on random tokens, eager or torch.compile'd, each step timed with
CUDA events after a warm-up. --attention naive swaps SDPA for nanoGPT's one-kernel-per-op
attention and --optimizer the fused AdamW for the foreach or for-loop one. Prints a RESULT line
with the median ms, tok/s, MFU and peak memory (and the attention and optimizer when they are not
the defaults); --json writes the measurement for scripts/plot.py."""
import argparse
import statistics

import torch

from gpt2_model import GPT, gpt2_adamw, gpt2_step, init_gpt2_
from results import add_json_argument, device_name, write_results
from timing import time_steps

# torch.optim.AdamW's implementation switches for each --optimizer.
OPTIMIZERS = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False, fused=False)}


def names(a):
    """(workload, variant) as ft-bench writes them: gpt2-124M only at its own shapes."""
    workload = "gpt2-124M" if (a.batch, a.seq, a.layers) == (16, 1024, 12) else f"gpt2 B{a.batch} T{a.seq} L{a.layers}"
    variant = f"torch {a.mode}" + (" naive" if a.attention == "naive" else "")
    return workload, variant + (f" {a.optimizer}" if a.optimizer != "fused" else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--mode", default="compile", choices=["compile", "eager"])
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "naive"],
                    help="naive: nanoGPT's non-flash attention, one kernel per op")
    ap.add_argument("--optimizer", default="fused", choices=list(OPTIMIZERS), help="torch.optim.AdamW's implementation")
    add_json_argument(ap)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = GPT(50304, 1024, a.layers, 12, 768, attention=a.attention).cuda()
    init_gpt2_(model)
    opt = gpt2_adamw(model, **OPTIMIZERS[a.optimizer])
    forward = torch.compile(model) if a.mode == "compile" else model
    ids = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")

    step = gpt2_step(model, forward, opt, ids, targets)

    times, loss = time_steps(step, a.warmup, a.steps, reset_peak_memory=True)
    ms = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    tok_per_s = a.batch * a.seq / (ms / 1e3)
    mfu = (6 * params + 6 * a.layers * 768 * a.seq) * tok_per_s / 989e12
    peak_gb = torch.cuda.max_memory_allocated() / 1e9
    # The defaults' line stays as the device scripts grep it; other choices are appended to it.
    extra = (f" attention={a.attention}" if a.attention != "sdpa" else "") + \
        (f" optimizer={a.optimizer}" if a.optimizer != "fused" else "")
    print(f"RESULT gpt2 torch={a.mode} ms={ms:.3f} tok_per_s={tok_per_s:.0f} mfu={mfu:.4f} "
          f"peak_gb={peak_gb:.3f} loss={loss.item():.4f}{extra}", flush=True)
    if a.json:
        workload, variant = names(a)
        write_results(a.json, device_name(), [{"workload": workload, "variant": variant, "ms": ms,
                                               "tok_per_s": tok_per_s, "peak_gb": peak_gb}])


if __name__ == "__main__":
    main()
