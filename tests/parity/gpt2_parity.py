"""GPT-2 parity: ft-gpt2 against a plain PyTorch GPT-2 started from the same weights.

Runs ft-gpt2 (on the GPU, in the kernel mode given) for --steps AdamW steps on a byte-level
text corpus with --dump-dir, which writes the initial parameters, every step's batch, and step
1's loss and gradients. Then builds the same model in PyTorch (fp32, the reference), loads those
weights and checks:
  1. step 1's loss, and every parameter's gradient, within bf16 tolerance (ft computes in bf16);
  2. the loss curve of --steps AdamW steps (same batches, lr, betas, weight decay on 2-D
     weights, clipping at global norm 1.0) against ft's, step by step.
Exits non-zero, naming what differs, when a check fails. Needs torch and safetensors.

    python3 tests/parity/gpt2_parity.py --ft build/examples/ft-gpt2 --kernels fused
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from safetensors import safe_open

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
from gpt2_model import GPT  # noqa: E402  (the model the torch.compile peer also runs)

# The preset, data and optimizer settings both sides use.
MODEL = dict(layers=6, heads=6, channels=384)  # ft-gpt2 --model d6 (HS 64: the fused attention runs)
BATCH, SEQ, LR, BETAS, EPS, WD, CLIP = 4, 128, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", required=True, help="path to the ft-gpt2 binary")
    ap.add_argument("--kernels", default="fused", choices=["fused", "unfused"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda", help="where both sides run (cpu: a check of this script itself)")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "docs", "*.md"))
    ap.add_argument("--work", default="", help="folder for ft-gpt2's dumps (default: a temporary one)")
    ap.add_argument("--loss-tol", type=float, default=0.01, help="relative, step 1's loss")
    ap.add_argument("--grad-tol", type=float, default=0.05, help="norm-wise relative, each gradient")
    ap.add_argument("--curve-tol", type=float, default=0.03, help="relative, each step's loss over the run")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="gpt2-parity-")
    metrics = os.path.join(work, "metrics.jsonl")
    cmd = [a.ft, "--train", a.data, "--format", "text", "--model", "d6", "--batch", str(BATCH), "--seq", str(SEQ),
           "--steps", str(a.steps), "--lr", str(LR), "--warmup", "0", "--min-lr-frac", "1", "--weight-decay", str(WD),
           "--clip", str(CLIP), "--shuffle", "0", "--log-every", "1", "--device", a.device, "--kernels", a.kernels,
           "--metrics", metrics, "--dump-dir", work]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    ft_losses = [json.loads(line)["loss"] for line in open(metrics)]

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    init = load_file(os.path.join(work, "init.safetensors"))
    vocab, block = init["wte.weight"].shape[0], init["wpe.weight"].shape[0]
    model = GPT(vocab, block, **MODEL).to(a.device)
    with torch.no_grad():
        for name, param in model.p.items():
            param.copy_(init[name])
    batches = load_file(os.path.join(work, "batches.safetensors"))
    batch = lambda s: (batches[f"inputs.{s}.0"].to(a.device), batches[f"targets.{s}.0"].to(a.device))

    failures = []
    # 1. Step 1: loss and gradients.
    ids, targets = batch(0)
    loss = model(ids, targets)
    loss.backward()
    with safe_open(os.path.join(work, "grads.safetensors"), "pt") as f:
        ft_loss = float(f.metadata()["loss"])
        ft_grads = {k: f.get_tensor(k) for k in f.keys()}
    loss_err = abs(ft_loss - loss.item()) / abs(loss.item())
    print(f"step 1 loss: ft {ft_loss:.6f} torch {loss.item():.6f} (rel {loss_err:.2e}, tol {a.loss_tol})")
    if loss_err > a.loss_tol:
        failures.append(f"step 1 loss differs by {loss_err:.2e}")
    worst = 0.0
    for name, param in model.p.items():
        err = rel(ft_grads[name].to(a.device), param.grad)
        worst = max(worst, err)
        if err > a.grad_tol:
            failures.append(f"gradient of {name}: norm-wise relative error {err:.2e} > {a.grad_tol}")
    print(f"gradients: {len(model.p)} tensors, worst norm-wise relative error {worst:.2e} (tol {a.grad_tol})")

    # 2. The loss curve over the run, from the same initial weights.
    with torch.no_grad():
        for name, param in model.p.items():
            param.copy_(init[name])
    decay = [p for p in model.p.values() if p.dim() >= 2]
    rest = [p for p in model.p.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                            betas=BETAS, eps=EPS)
    worst = 0.0
    print(f"{'step':>5} {'ft':>10} {'torch':>10} {'rel':>9}")
    for s in range(a.steps):
        opt.zero_grad(set_to_none=True)
        ids, targets = batch(s)
        loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        err = abs(ft_losses[s] - loss.item()) / abs(loss.item())
        worst = max(worst, err)
        print(f"{s + 1:>5} {ft_losses[s]:>10.4f} {loss.item():>10.4f} {err:>9.2e}")
    if worst > a.curve_tol:
        failures.append(f"loss curves differ by up to {worst:.2e} (relative) > {a.curve_tol}")
    print(f"loss curve: {a.steps} steps, worst relative difference {worst:.2e} (tol {a.curve_tol})")
    if ft_losses[-1] >= ft_losses[0]:
        failures.append("ft's loss did not fall over the run")
    for f in failures:
        print("FAIL:", f)
    print(f"RESULT parity kernels={a.kernels} {'PASS' if not failures else 'FAIL'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
