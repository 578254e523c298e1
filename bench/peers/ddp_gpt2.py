"""PyTorch DDP peer for data-parallel gpt2-124M: the step of gpt2_torch.py (B per GPU, T 1024,
bf16 autocast, SDPA, fused AdamW, clipping at 1.0) under DistributedDataParallel (25 MB buckets,
gradients as bucket views), one process a GPU, started by torchrun:

    torchrun --standalone --nproc_per_node N bench/peers/ddp_gpt2.py [--mode eager|compile]

Run without torchrun it is the same step on one GPU without DDP, the baseline its scaling is
taken against. The time of a step is the wall clock over the timed steps after a synchronize
(what a user waits for, the all-reduce included), the median of --repeats such windows. Rank 0
prints a RESULT line with the global tok/s; --json writes it for scripts/plot.py."""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

from gpt2_model import GPT, gpt2_adamw, gpt2_step, init_gpt2_
from results import add_json_argument, device_name, write_results


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=16, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="steps in a timed window")
    ap.add_argument("--repeats", type=int, default=3, help="timed windows; the median is reported")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    add_json_argument(ap)
    a = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    if world > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.manual_seed(0)
    model = GPT(50304, 1024, 12, 12, 768).cuda()
    init_gpt2_(model)
    opt = gpt2_adamw(model, fused=True)
    net = model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=25,
                                                        gradient_as_bucket_view=True)
    forward = torch.compile(net) if a.mode == "compile" else net
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    ids = torch.randint(0, 50257, (a.batch, a.seq), device="cuda", generator=g)
    targets = torch.randint(0, 50257, (a.batch, a.seq), device="cuda", generator=g)

    step = gpt2_step(model, forward, opt, ids, targets)

    for _ in range(a.warmup):
        step()
    windows = []
    for _ in range(a.repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        torch.cuda.synchronize()
        windows.append((time.perf_counter() - t0) * 1e3 / a.steps)
    ms = statistics.median(windows)
    tok_per_s = world * a.batch * a.seq / (ms / 1e3)
    if rank == 0:
        print(f"RESULT ddp_gpt2 world={world} mode={a.mode} ms={ms:.3f} tok_per_s={tok_per_s:.0f} "
              f"windows={','.join(f'{w:.3f}' for w in windows)} loss={loss.item():.4f}", flush=True)
        if a.json:
            write_results(a.json, device_name(), [{"workload": "gpt2-124M", "variant": f"torch ddp x{world} {a.mode}",
                                                   "ms": ms, "tok_per_s": tok_per_s}])
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
