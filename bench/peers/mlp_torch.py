"""PyTorch peer for ft-mlp's mlp-fmnist step: 784 -> 1024 x3 -> 10, each hidden Linear followed
by LayerNorm, GELU (tanh) and Dropout 0.1, cross-entropy, AdamW (lr 1e-3, weight decay 0.01), batch
4096, bf16 parameters as ft-mlp keeps them on CUDA (fp32 AdamW moments), on random inputs. Times
the step eagerly and with the whole step in one CUDA graph (capturable AdamW, static inputs),
each with CUDA events after a warm-up, and prints a RESULT line with both medians; --json writes
them for scripts/plot.py (workload mlp-fmnist, variants "torch eager" and "torch graph")."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from results import add_json_argument, device_name, write_results
from timing import median_ms


def build():
    layers, width = [], 784
    for _ in range(3):
        layers += [nn.Linear(width, 1024), nn.LayerNorm(1024), nn.GELU(approximate="tanh"), nn.Dropout(0.1)]
        width = 1024
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers).cuda()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    add_json_argument(ap)
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(a.batch, 784, device="cuda")
    y = torch.randint(0, 10, (a.batch,), device="cuda")
    results = {}
    for mode in ("eager", "graph"):
        model = build().to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, capturable=(mode == "graph"))

        def step():
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(x.to(torch.bfloat16)), y)
            loss.backward()
            opt.step()
            return loss

        if mode == "eager":
            results[mode] = median_ms(step, a.warmup, a.steps)
            continue
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        results[mode] = median_ms(graph.replay, a.warmup, a.steps)
    print(f"RESULT mlp torch_eager_ms={results['eager']:.4f} torch_graph_ms={results['graph']:.4f}", flush=True)
    if a.json:
        write_results(a.json, device_name(), [{"workload": "mlp-fmnist", "variant": f"torch {mode}", "ms": ms}
                                              for mode, ms in results.items()])


if __name__ == "__main__":
    main()
