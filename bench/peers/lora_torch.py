"""PyTorch peer for `ft-bench lora` (the lora-gpt2 workload): LoRA fine-tuning steps of gpt2-124M
(V=50304, T=1024, 12 layers, 12 heads, 768 channels) on random tokens, B=16. The base is frozen
and stored in bf16; LoRA adapters as PEFT defines them (r 16, alpha 32, dropout 0 unless the
flags say otherwise) on all four linears of every block, in fp32, trained by fused AdamW (lr
6e-4, betas 0.9/0.95, wd 0.1 on the adapters, all 2-D, as ft-bench lora) after clipping at 1.0;
the forward under bf16 autocast, SDPA attention, mean cross-entropy. Eager or torch.compile'd;
each step timed with CUDA events after a warm-up. Prints a RESULT line with the median ms, tok/s,
MFU (ft's count: 4 FLOPs a parameter a token, 2 more a trainable one, and the attention's
6·L·C·T) and the peak memory of the timed steps; --json writes them for scripts/plot.py (workload
lora-gpt2 at its own shapes, variant "torch eager" or "torch compile").

    python3 bench/peers/lora_torch.py --mode compile
    python3 bench/peers/lora_torch.py --device cpu --mode eager --layers 1 --batch 1 --seq 64 --steps 2 --warmup 1
"""
import argparse
import statistics

import torch

from gpt2_model import GPT, init_gpt2_
from results import add_json_argument, device_name, write_results
from timing import time_steps


def workload(a):
    """lora-gpt2 only at its own shapes, rank and dropout, as gpt2_torch.py names gpt2-124M."""
    if (a.batch, a.seq, a.layers, a.rank, a.dropout) == (16, 1024, 12, 16, 0.0):
        return "lora-gpt2"
    return f"lora-gpt2 B{a.batch} T{a.seq} L{a.layers} r{a.rank}" + (f" p{a.dropout:g}" if a.dropout else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--mode", default="compile", choices=["compile", "eager"])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--dropout", type=float, default=0.0, help="on the adapters' input")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (wall-clock timing)")
    add_json_argument(ap)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    torch.manual_seed(0)
    model = GPT(50304, 1024, a.layers, 12, 768)
    init_gpt2_(model)
    model.to(a.device)
    with torch.no_grad():
        for p in model.p.values():  # the frozen base, in bf16 (add_lora freezes it)
            p.data = p.data.to(torch.bfloat16)
    model.add_lora(a.rank, a.alpha, dropout=a.dropout)
    adapters = list(model.lora.values())  # fp32
    opt = torch.optim.AdamW(adapters, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=cuda)
    forward = torch.compile(model) if a.mode == "compile" else model
    ids = torch.randint(0, 50257, (a.batch, a.seq), device=a.device)
    targets = torch.randint(0, 50257, (a.batch, a.seq), device=a.device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16):
            loss = forward(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(adapters, 1.0)
        opt.step()
        return loss

    times, loss = time_steps(step, a.warmup, a.steps, a.device, reset_peak_memory=True)
    ms = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in adapters)
    tok_per_s = a.batch * a.seq / (ms / 1e3)
    mfu = (4 * params + 2 * trainable + 6 * a.layers * 768 * a.seq) * tok_per_s / 989e12
    peak_gb = torch.cuda.max_memory_allocated() / 1e9 if cuda else 0.0
    print(f"RESULT lora-gpt2 torch={a.mode} rank={a.rank} dropout={a.dropout:g} ms={ms:.3f} tok_per_s={tok_per_s:.0f} "
          f"mfu={mfu:.4f} peak_gb={peak_gb:.3f} loss={loss.item():.4f}", flush=True)
    if a.json:
        result = {"workload": workload(a), "variant": f"torch {a.mode}", "ms": ms, "tok_per_s": tok_per_s}
        if cuda:  # no peak memory on the CPU
            result["peak_gb"] = peak_gb
        write_results(a.json, device_name(a.device), [result])


if __name__ == "__main__":
    main()
