"""Llama parity: ft's Llama (models/llama) against transformers' LlamaForCausalLM.

Builds a small LlamaForCausalLM with random weights (4 layers, width 256, 8 query heads and 2
key/value heads, MLP 688, vocabulary 3000, untied head, Llama 3 RoPE scaling with a short original
context so that every band of frequencies is used at T 128), saves it with save_pretrained, draws
20 batches of arithmetic sequences (learnable, so the loss falls), and runs ft-llama-parity on
them in the kernel mode given (bf16 on the GPU). Checks:
  1. step 1's logits, loss and every parameter's gradient against transformers in f64 (eager
     attention): with ft in bf16, 1% on the loss and, on each gradient, 5% norm-wise or twice
     transformers' own bf16-autocast error on it, whichever is larger (a near-uniform attention
     at initialization makes the query and key gradients small differences, which bf16 keeps
     poorly); with ft in f32 (--dtype f32), 1e-4 on the loss and 2e-3 on each gradient;
  2. the 20-step AdamW loss curve: ft may drift from transformers' fp32 curve by at most twice
     what transformers' own bf16-autocast run drifts (or 1%);
  3. the folder ft exports after training loads with LlamaForCausalLM.from_pretrained and gives
     the logits ft computes from the same folder in fp32 (1e-4, relative to the logits' norm).
Exits non-zero, naming what differs, when a check fails. Needs torch, transformers, safetensors.

    python3 tests/parity/llama_parity.py --ft build/tests/ft-llama-parity --kernels fused
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_steps import adamw_losses  # noqa: E402

CONFIG = dict(vocab_size=3000, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500000.0,
              rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                original_max_position_embeddings=64),
              tie_word_embeddings=False, hidden_act="silu", attention_bias=False, mlp_bias=False)
BATCH, SEQ, LR, BETAS, EPS = 4, 128, 1e-3, (0.9, 0.95), 1e-8


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def batches(steps, vocab, seed):
    """Arithmetic sequences: token t+1 = token t + d (mod V), d in 1..3 per sequence."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (steps, BATCH, 1), generator=g)
    step = torch.randint(1, 4, (steps, BATCH, 1), generator=g)
    seq = (start + step * torch.arange(SEQ + 1)) % vocab
    return {"inputs": seq[:, :, :-1].contiguous(), "targets": seq[:, :, 1:].contiguous()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", required=True, help="path to the ft-llama-parity binary")
    ap.add_argument("--kernels", default="fused", choices=["fused", "unfused"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--work", default="")
    ap.add_argument("--loss-tol", type=float, default=0.01)
    ap.add_argument("--grad-tol", type=float, default=0.05)
    ap.add_argument("--curve-tol", type=float, default=0.01)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"], help="ft's parameters and activations")
    a = ap.parse_args()
    if a.dtype == "f32":
        a.loss_tol, a.grad_tol = 1e-4, 2e-3
    work = a.work or tempfile.mkdtemp(prefix="llama-parity-")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="eager")).to(torch.float32)
    model_dir = os.path.join(work, "model")
    model.save_pretrained(model_dir, safe_serialization=True)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    saved = json.load(open(os.path.join(model_dir, "config.json")))
    print("saved config's rope:", {k: v for k, v in saved.items() if "rope" in k})
    data = batches(a.steps, CONFIG["vocab_size"], seed=1)
    save_file(data, os.path.join(work, "batches.safetensors"))

    out = os.path.join(work, "ft")
    env = dict(os.environ, FT_KERNELS=a.kernels)
    cmd = [a.ft, model_dir, os.path.join(work, "batches.safetensors"), out, str(a.steps), str(LR), a.dtype]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)
    ft_losses = json.load(open(os.path.join(out, "losses.json")))

    model = model.to(a.device)
    batch = lambda s: (data["inputs"][s].to(a.device), data["targets"][s].to(a.device))
    forward = lambda ids, targets: torch.nn.functional.cross_entropy(
        model(ids).logits.float().reshape(-1, CONFIG["vocab_size"]), targets.reshape(-1))
    failures = []

    # 1. Step 1: logits, loss and gradients in f64, and transformers' own bf16-autocast gradients,
    # whose error sets the allowance for ft's in bf16. The logits tell a forward gap (a config
    # read differently: transformers v5 keeps the rope's theta in rope_parameters) from a
    # gradient one.
    ids, targets = batch(0)
    with torch.autocast(a.device, dtype=torch.bfloat16):
        forward(ids, targets).backward()
    autocast_grads = {name: p.grad.clone().double() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.double()
    loss = torch.nn.functional.cross_entropy(model(ids).logits.reshape(-1, CONFIG["vocab_size"]), targets.reshape(-1))
    loss.backward()
    ft_grads = load_file(os.path.join(out, "grads.safetensors"))
    with torch.no_grad():
        theirs0 = model(ids).logits
    ours0 = load_file(os.path.join(out, "logits0.safetensors"))["logits"].to(a.device).double()
    token_loss = lambda z: torch.nn.functional.cross_entropy(z.reshape(-1, CONFIG["vocab_size"]), targets.reshape(-1),
                                                             reduction="none")
    per_token = (token_loss(ours0) - token_loss(theirs0)).abs()
    print(f"step 1 logits: relative difference {rel(ours0, theirs0):.2e}; per-token loss gap max "
          f"{per_token.max().item():.2e} at {per_token.argmax().item()}, mean {per_token.mean().item():.2e}")
    loss_err = abs(ft_losses[0] - loss.item()) / abs(loss.item())
    print(f"step 1 loss: ft {ft_losses[0]:.6f} transformers f64 {loss.item():.6f} (rel {loss_err:.2e}, tol {a.loss_tol})")
    if loss_err > a.loss_tol:
        failures.append(f"step 1 loss differs by {loss_err:.2e}")
    worst, names = 0.0, 0
    for name, param in model.named_parameters():
        if name not in ft_grads:
            failures.append(f"ft has no gradient named {name}")
            continue
        err = rel(ft_grads[name].to(a.device).double(), param.grad)
        bf16_err = rel(autocast_grads[name], param.grad)
        allowed = a.grad_tol if a.dtype == "f32" else max(a.grad_tol, 2.0 * bf16_err)
        worst, names = max(worst, err / allowed), names + 1
        g, h = ft_grads[name].to(a.device).double(), param.grad
        scale = ((g * h).sum() / (h * h).sum()).item()  # the best factor from theirs to ours
        print(f"  {name}: ft {err:.2e}, transformers bf16 {bf16_err:.2e}, allowed {allowed:.2e}; norms ft "
              f"{g.norm().item():.3e} theirs {h.norm().item():.3e}, best scale {scale:.4f}, error after it "
              f"{rel(g, scale * h):.2e}")
        if err > allowed:
            failures.append(f"gradient of {name}: norm-wise relative error {err:.2e} > {allowed:.2e}")
    print(f"gradients: {names} tensors, worst error {worst:.2f} of its allowance")

    # 2. The loss curve, from the same weights, in fp32 and under bf16 autocast.
    model.float()
    model.zero_grad(set_to_none=True)

    def curve(bf16):
        model.load_state_dict(init)
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0)
        return adamw_losses(forward, opt, list(model.parameters()), batch, a.steps, a.device, bf16, clip=1e9)

    fp32, bf16 = curve(False), curve(True)
    relative = lambda x, y: abs(x - y) / abs(y)
    for s in range(a.steps):
        print(f"{s + 1:>5} ft {ft_losses[s]:>9.4f} fp32 {fp32[s]:>9.4f} bf16 {bf16[s]:>9.4f} "
              f"ft rel {relative(ft_losses[s], fp32[s]):.2e} bf16 rel {relative(bf16[s], fp32[s]):.2e}")
    worst = max(relative(x, y) for x, y in zip(ft_losses, fp32))
    drift = max(relative(x, y) for x, y in zip(bf16, fp32))
    allowed = max(a.curve_tol, 2.0 * drift)
    print(f"loss curve: {a.steps} steps, ft vs fp32 worst {worst:.2e}; bf16 vs fp32 {drift:.2e}; allowed {allowed:.2e}")
    if worst > allowed:
        failures.append(f"loss curves differ by up to {worst:.2e} > {allowed:.2e}")
    if ft_losses[-1] >= ft_losses[0]:
        failures.append("ft's loss did not fall over the run")

    # 3. The exported folder in transformers.
    exported = LlamaForCausalLM.from_pretrained(os.path.join(out, "export"), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = exported(data["inputs"][0]).logits.float()
    ours = load_file(os.path.join(out, "logits.safetensors"))["logits"].float()
    err = rel(ours, theirs)
    print(f"export: from_pretrained loads it; logits relative difference {err:.2e} (tol 1e-4)")
    if err > 1e-4:
        failures.append(f"the exported model's logits differ by {err:.2e}")

    for f in failures:
        print("FAIL:", f)
    print(f"RESULT llama parity kernels={a.kernels} dtype={a.dtype} {'PASS' if not failures else 'FAIL'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
