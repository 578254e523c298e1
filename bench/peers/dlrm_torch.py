"""PyTorch peer for the DLRM workloads (dlrm-kaggle, dlrm-mlperf): facebookresearch/dlrm's model with
the dot interaction. Bottom MLP 13-...-D (Linear+ReLU throughout), 26 tables nn.EmbeddingBag(rows, D,
sum, sparse=True) with one id per sample, T = stack(bottom, 26 pooled) -> T @ T^T, strictly lower
triangle (i > j, row-major) concatenated after the bottom output, top MLP (ReLU except the last
layer, one logit), mean BCE with logits, dlrm's weight init. Presets: bench (dlrm-kaggle: D=64, 26 x
100k rows, batch 8192, fused AdamW lr 1e-3 on the MLPs + sparse SGD lr 0.01 on the tables), mlperf
(dlrm-mlperf: D=128, 26 x 1M rows, batch 65536, same optimizers) and kaggle (dlrm's Kaggle config:
D=16, batch 128, SGD lr 0.1 on everything). Fixed random inputs uploaded once; each step (zero_grad,
forward, loss, backward, both optimizer steps) is timed eagerly and with torch.compile'd forward
(optimizers eager), with CUDA events after a warm-up. Prints the median ms, samples/s and peak
memory per mode and a RESULT line; --json writes the modes that ran for scripts/plot.py (workload
dlrm-kaggle, dlrm-mlperf or dlrm kaggle-config by preset, variants "torch eager" and "torch compile",
" bf16" appended under --dtype bf16). --check runs a float64 CPU self-test and prints PASS/FAIL."""
import argparse
import gc
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from results import add_json_argument, device_name, write_results
from timing import time_steps

PRESETS = {  # bottom and top exclude the input widths (13 and D + pairs)
    "bench": dict(dim=64, rows=100_000, bottom=[512, 256, 64], top=[512, 256, 1], batch=8192, opt="adamw"),
    "mlperf": dict(dim=128, rows=1_000_000, bottom=[512, 256, 128], top=[1024, 1024, 512, 256, 1], batch=65536,
                   opt="adamw"),
    "kaggle": dict(dim=16, rows=100_000, bottom=[512, 256, 64, 16], top=[512, 256, 1], batch=128, opt="sgd"),
}
NUM_DENSE, NUM_TABLES = 13, 26
# --json's workload of each preset: docs/workloads.md's names, those of ft-bench dlrm's bench and mlperf
# presets; the kaggle preset is dlrm's own Kaggle recipe, not the dlrm-kaggle workload.
WORKLOADS = {"bench": "dlrm-kaggle", "mlperf": "dlrm-mlperf", "kaggle": "dlrm kaggle-config"}


def mlp(widths, relu_last, **kw):
    layers = []
    for k in range(len(widths) - 1):
        layers.append(nn.Linear(widths[k], widths[k + 1], **kw))
        if relu_last or k < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def interact(bottom, pooled, li, lj):
    t = torch.stack([bottom] + pooled, dim=1)  # [B, 1 + tables, D]
    z = torch.bmm(t, t.transpose(1, 2))
    return torch.cat([bottom, z[:, li, lj]], dim=1)


class DLRM(nn.Module):
    def __init__(self, dim, rows, tables, bottom, top, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        assert bottom[-1] == dim
        self.bot = mlp([NUM_DENSE] + bottom, True, **kw)
        self.emb = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, **kw) for _ in range(tables))
        n = tables + 1
        li, lj = torch.tril_indices(n, n, offset=-1, device=device)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = mlp([dim + n * (n - 1) // 2] + top, False, **kw)
        with torch.no_grad():  # dlrm's init
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    out, inp = m.weight.shape
                    m.weight.normal_(0.0, math.sqrt(2.0 / (inp + out)))
                    m.bias.normal_(0.0, math.sqrt(1.0 / out))
                elif isinstance(m, nn.EmbeddingBag):
                    bound = math.sqrt(1.0 / m.weight.shape[0])
                    m.weight.uniform_(-bound, bound)

    def forward(self, x, ids, offsets):  # x [B, 13], ids [tables, B], offsets [B]
        b = self.bot(x)
        pooled = [e(ids[k], offsets) for k, e in enumerate(self.emb)]
        return self.top(interact(b, pooled, self.li, self.lj))  # [B, 1] logits


def make_inputs(batch, rows, tables, device, seed):
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.log1p(torch.randint(0, 10_000, (batch, NUM_DENSE), generator=g).float())
    ids = torch.randint(0, rows, (tables, batch), generator=g)
    y = (torch.rand(batch, generator=g) < 0.25).float()
    offsets = torch.arange(batch)
    return [t.to(device) for t in (x, ids, offsets, y)]


def run_mode(mode, a, cfg, device):
    torch.manual_seed(a.seed)  # same weights for every mode
    model = DLRM(cfg["dim"], a.table_rows, NUM_TABLES, cfg["bottom"], cfg["top"], device=device)
    dense = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    tables = list(model.emb.parameters())
    if cfg["opt"] == "adamw":
        opt_dense = torch.optim.AdamW(dense, lr=1e-3, weight_decay=0.0, fused=True)
        opt_sparse = torch.optim.SGD(tables, lr=0.01)
    else:
        opt_dense = torch.optim.SGD(dense, lr=0.1)
        opt_sparse = torch.optim.SGD(tables, lr=0.1)
    x, ids, offsets, y = make_inputs(a.batch, a.table_rows, NUM_TABLES, device, a.seed)
    forward = torch.compile(model) if mode == "compile" else model
    bf16 = a.dtype == "bf16"

    def step():
        opt_dense.zero_grad(set_to_none=True)
        opt_sparse.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logit = forward(x, ids, offsets)
        loss = F.binary_cross_entropy_with_logits(logit.float().squeeze(1), y)
        loss.backward()
        opt_dense.step()
        opt_sparse.step()
        return loss

    times, loss = time_steps(step, a.warmup, a.steps, device)
    ms, loss = statistics.median(times), loss.item()
    mem = torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else float("nan")
    return ms, mem, loss


def free(device):
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def check():
    """float64 CPU: interaction against a loop over pairs, one table's sparse gradient against
    central finite differences of one embedding element (its row used by two samples)."""
    torch.manual_seed(0)
    f64, tables, dim, rows, batch = torch.float64, 4, 3, 7, 5
    li, lj = torch.tril_indices(tables + 1, tables + 1, offset=-1)
    b = torch.randn(batch, dim, dtype=f64)
    pooled = [torch.randn(batch, dim, dtype=f64) for _ in range(tables)]
    vecs = [b] + pooled
    ref = torch.cat([b] + [(vecs[i] * vecs[j]).sum(1, keepdim=True) for i in range(tables + 1) for j in range(i)], 1)
    err_int = (interact(b, pooled, li, lj) - ref).abs().max().item()
    model = DLRM(dim, rows, tables, [6, dim], [8, 4, 1], dtype=f64)
    x, ids, offsets, y = make_inputs(batch, rows, tables, "cpu", 0)
    x, y = x.double(), y.double()
    t, c = 2, 1
    ids[t, 1] = ids[t, 0]  # a repeated row: its gradient must accumulate
    r = int(ids[t, 0])

    def loss_fn():
        return F.binary_cross_entropy_with_logits(model(x, ids, offsets).squeeze(1), y)

    loss_fn().backward()
    grad = model.emb[t].weight.grad.coalesce().to_dense()[r, c].item()
    w, eps = model.emb[t].weight.data, 1e-6
    with torch.no_grad():
        w[r, c] += eps
        lp = loss_fn().item()
        w[r, c] -= 2 * eps
        lm = loss_fn().item()
        w[r, c] += eps
    fd = (lp - lm) / (2 * eps)
    err_grad = abs(grad - fd) / max(abs(fd), 1e-12)
    ok = err_int < 1e-12 and err_grad < 1e-6 and grad != 0.0
    print(f"check interaction max_abs_err={err_int:.3e} (pairs={li.numel()})", flush=True)
    print(f"check table{t}[{r},{c}] grad={grad:.10e} fd={fd:.10e} rel_err={err_grad:.3e}", flush=True)
    print("PASS" if ok else "FAIL", flush=True)
    return ok


def json_results(a, cfg, results):
    """--json's results: one per mode that ran (a failed mode's ms is NaN and is left out), under the
    preset's workload name only at the preset's own batch and table rows."""
    workload = WORKLOADS[a.preset]
    if (a.batch, a.table_rows) != (cfg["batch"], cfg["rows"]):
        workload += f" B{a.batch} rows{a.table_rows}"
    out = []
    for mode, (ms, samples_per_s, mem) in results.items():
        if not math.isfinite(ms):
            continue
        out.append({"workload": workload, "variant": f"torch {mode}" + (" bf16" if a.dtype == "bf16" else ""),
                    "ms": ms, "samples_per_s": samples_per_s})
        if math.isfinite(mem):  # NaN on the CPU
            out[-1]["peak_gb"] = mem
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="bench", choices=list(PRESETS))
    ap.add_argument("--batch", type=int, default=None, help="default: the preset's")
    ap.add_argument("--table-rows", type=int, default=None, help="rows per table; default: the preset's")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--modes", default="eager,compile", help="comma list from eager,compile")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: MLPs under autocast")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="float64 CPU self-test, then exit")
    add_json_argument(ap)
    a = ap.parse_args()
    if a.check:
        raise SystemExit(0 if check() else 1)
    cfg = PRESETS[a.preset]
    a.batch = a.batch or cfg["batch"]
    a.table_rows = a.table_rows or cfg["rows"]
    modes = [m for m in a.modes.split(",") if m]
    assert all(m in ("eager", "compile") for m in modes), a.modes
    device = torch.device(a.device)
    top_in = cfg["dim"] + (NUM_TABLES + 1) * NUM_TABLES // 2
    print(f"dlrm preset={a.preset} D={cfg['dim']} tables={NUM_TABLES}x{a.table_rows} "
          f"bottom={'-'.join(map(str, [NUM_DENSE] + cfg['bottom']))} top={'-'.join(map(str, [top_in] + cfg['top']))} "
          f"batch={a.batch} dtype={a.dtype} opt={cfg['opt']} device={device} torch={torch.__version__}", flush=True)
    results = {}
    for mode in modes:
        free(device)
        try:
            ms, mem, loss = run_mode(mode, a, cfg, device)
            print(f"{mode}: {ms:.4f} ms/step, {a.batch / ms * 1e3:.0f} samples/s, peak {mem:.3f} GB, "
                  f"loss {loss:.4f}", flush=True)
        except Exception as e:  # noqa: BLE001 -- report and go on with the other mode
            msg = " ".join(str(e).split())[:300]
            print(f"{mode}: FAILED {type(e).__name__}: {msg}", flush=True)
            ms, mem = float("nan"), float("nan")
        results[mode] = (ms, a.batch / ms * 1e3, mem)
        if mode == "compile":
            torch._dynamo.reset()
    free(device)
    parts = [f"{m}_ms={results[m][0]:.4f} {m}_samples_s={results[m][1]:.0f}" for m in modes]
    parts += [f"{m}_mem_gb={results[m][2]:.3f}" for m in modes]
    print(f"RESULT preset={a.preset} dtype={a.dtype} batch={a.batch} " + " ".join(parts), flush=True)
    if a.json:
        write_results(a.json, device_name(device), json_results(a, cfg, results))


if __name__ == "__main__":
    main()
