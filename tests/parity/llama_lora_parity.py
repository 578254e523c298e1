"""Llama LoRA parity: ft-gpt2's LoRA fine-tuning of a Llama against PEFT on LlamaForCausalLM.

Builds llama_parity.py's small LlamaForCausalLM (4 layers, width 256, 8 query and 2 key/value
heads, vocabulary 3000, untied, Llama 3 RoPE scaling) with random weights and saves it with
save_pretrained; writes a token shard of arithmetic sequences (learnable); then runs
ft-gpt2 --init-from that folder (the family read from its config.json) with LoRA adapters (rank
8, alpha 16, dropout 0, on all seven projections unless --targets says otherwise) for --steps
AdamW steps (constant lr, weight decay, clipping at 1.0), with --dump-dir (initial parameters,
every batch, step 1's gradients) and a checkpoint at the end (PEFT's adapter files). Checks:
  1. PeftModel.from_pretrained loads the final checkpoint's adapter files onto the base, and
     every adapter weight it holds is the file's (PEFT only warns about keys it does not find);
  2. step 1 from the dumped initial adapters, in a get_peft_model of the base: the loss, lora_A's
     gradients exactly 0 on both sides (B starts at 0), lora_B's within --grad-tol norm-wise
     (with ft in bf16: or three times PEFT's own bf16-autocast drift, if larger);
  3. the loss curve of the same AdamW steps on PEFT's adapters (same batches, lr, betas, weight
     decay, clipping): ft may drift from the fp32 curve by twice PEFT's bf16 drift (or --curve-tol);
  4. the final adapters in ft's files against PEFT's after those steps (--param-tol, or three
     times the bf16 drift).
Prints its checks, then `RESULT llama-lora-parity kernels=... PASS|FAIL`, exiting non-zero with
what differs. Needs torch, transformers, peft and safetensors (the device image has them).

    python3 tests/parity/llama_lora_parity.py --ft build/examples/ft-gpt2 --kernels fused
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_parity import CONFIG  # noqa: E402
from torch_steps import adamw_losses  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BATCH, SEQ, LR, BETAS, EPS, WD, CLIP = 4, 128, 2e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def write_shard(path, tokens):
    """An llm.c shard (GPT-2's form: magic 20240520, version 1, uint16 tokens; the vocabulary is 3000)."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def arithmetic_tokens(count, vocab, seed):
    """Runs of 64 tokens, each t + d (mod V) from a random start and d in 1..3."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        start, step = rng.integers(0, vocab), rng.integers(1, 4)
        out.extend(((start + step * np.arange(64)) % vocab).tolist())
    return out[:count]


def peft_name(ft_name):
    """model.layers.0.self_attn.q_proj.lora_A.weight -> PEFT's module parameter name."""
    return "base_model.model." + ft_name.replace(".lora_A.weight", ".lora_A.default.weight").replace(
        ".lora_B.weight", ".lora_B.default.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ft", required=True, help="path to the ft-gpt2 binary")
    ap.add_argument("--kernels", default="fused", choices=["fused", "unfused"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda", help="where both sides run (cpu: a check of this script itself)")
    ap.add_argument("--work", default="", help="folder for the base, the shard, dumps and checkpoints (default: temporary)")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--loss-tol", type=float, default=0.01)
    ap.add_argument("--grad-tol", type=float, default=0.05)
    ap.add_argument("--curve-tol", type=float, default=0.01)
    ap.add_argument("--param-tol", type=float, default=1e-3)
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    work = a.work or tempfile.mkdtemp(prefix="llama-lora-parity-")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failures = []

    def check(what, value, tol, ok, detail=""):
        print(f"  {what:<60} {str(value):>10} {str(tol):>9}  {'ok' if ok else 'FAIL'}{'  ' + detail if detail else ''}")
        if not ok:
            failures.append(what + (f": {detail}" if detail else f" = {value} (tol {tol})"))

    base_dir = os.path.join(work, "base")
    LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="eager")).to(torch.float32).save_pretrained(
        base_dir, safe_serialization=True)
    shard = os.path.join(work, "train.bin")
    write_shard(shard, arithmetic_tokens(BATCH * SEQ * (a.steps + 2) + 1, CONFIG["vocab_size"], seed=1))
    dump, ckpt = os.path.join(work, "A"), os.path.join(work, "ckpt")
    cmd = [a.ft, "--init-from", base_dir, "--train", shard, "--batch", str(BATCH), "--seq", str(SEQ),
           "--steps", str(a.steps), "--lr", str(LR), "--warmup", "0", "--min-lr-frac", "1", "--weight-decay", str(WD),
           "--clip", str(CLIP), "--shuffle", "0", "--log-every", "1", "--device", a.device, "--kernels", a.kernels,
           "--lora-rank", str(a.rank), "--lora-alpha", str(a.alpha), "--lora-dropout", "0",
           "--lora-targets", ",".join(targets), "--metrics", os.path.join(dump, "metrics.jsonl"), "--dump-dir", dump,
           "--ckpt-dir", ckpt, "--ckpt-every", str(a.steps)]
    print("running:", " ".join(cmd), flush=True)
    log = os.path.join(work, "ft.log")
    with open(log, "w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        print(open(log).read()[-3000:])
        print(f"FAIL: ft-gpt2 exited with {rc}; its output: {log}")
        print(f"RESULT llama-lora-parity kernels={a.kernels} FAIL")
        sys.exit(1)
    ft_losses = {r["step"]: r["loss"] for r in map(json.loads, open(os.path.join(dump, "metrics.jsonl")))
                 if "loss" in r}
    final_dir = os.path.join(ckpt, f"step_{a.steps:08d}")
    print(f"\n  {'check':<60} {'value':>10} {'tol':>9}")

    # 1. PEFT reads ft's files onto the base.
    files = load_file(os.path.join(final_dir, "adapter_model.safetensors"))
    loaded = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32), final_dir)
    state = dict(loaded.named_parameters())
    wrong = [k for k, t in files.items() if k.replace(".weight", ".default.weight") not in state or
             not torch.equal(state[k.replace(".weight", ".default.weight")].detach().float(), t.float())]
    expected = 2 * len(targets) * CONFIG["num_hidden_layers"]
    check("PEFT loads ft's adapter files: every tensor in place", f"{len(files) - len(wrong)}/{len(files)}",
          f"{expected}", not wrong and len(files) == expected, f"not loaded: {wrong[:3]}" if wrong else "")
    del loaded

    # 2. Step 1 in PEFT from ft's initial adapters.
    init = load_file(os.path.join(dump, "init.safetensors"))
    adapters0 = {k: v for k, v in init.items() if ".lora_" in k}
    batches = load_file(os.path.join(dump, "batches.safetensors"))
    batch = lambda s: (batches[f"inputs.{s}.0"].to(a.device), batches[f"targets.{s}.0"].to(a.device))
    base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model = get_peft_model(base, LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0,
                                            target_modules=targets, bias="none")).to(a.device)
    params = dict(model.named_parameters())
    lora = {k: params[peft_name(k)] for k in adapters0 if peft_name(k) in params}
    check("ft's initial adapters = PEFT's modules", f"{len(lora)}/{len(adapters0)}", f"{expected}",
          len(lora) == len(adapters0) == expected)
    trained = [p for p in model.parameters() if p.requires_grad]
    check("PEFT trains the adapters alone", len(trained), expected, len(trained) == expected)

    def load_adapters(values):
        with torch.no_grad():
            for k, p in lora.items():
                p.copy_(values[k].to(a.device))

    forward = lambda ids, targets_: torch.nn.functional.cross_entropy(
        model(input_ids=ids).logits.float().reshape(-1, CONFIG["vocab_size"]), targets_.reshape(-1))
    load_adapters(adapters0)
    ids, tgt = batch(0)
    drift = {}
    if a.device == "cuda":
        with torch.autocast(a.device, dtype=torch.bfloat16):
            forward(ids, tgt).backward()
        autocast = {k: p.grad.clone() for k, p in lora.items()}
        model.zero_grad(set_to_none=True)
    loss = forward(ids, tgt)
    loss.backward()
    if a.device == "cuda":
        drift = {k: rel(autocast[k], p.grad) if p.grad.any() else 0.0 for k, p in lora.items()}
    with safe_open(os.path.join(dump, "grads.safetensors"), "pt") as f:
        meta = f.metadata()
        ft_grads = {k: f.get_tensor(k) for k in f.keys()}
    err = abs(float(meta["loss"]) - loss.item()) / abs(loss.item())
    check(f"step 1 loss: ft {float(meta['loss']):.5f} PEFT {loss.item():.5f}", f"{err:.2e}", a.loss_tol,
          err <= a.loss_tol)
    check("step 1 gradients dumped = the adapters", len(ft_grads), expected, set(ft_grads) == set(lora))
    a_names = [k for k in lora if ".lora_A." in k]
    nonzero = [k for k in a_names if (k in ft_grads and ft_grads[k].any()) or lora[k].grad.any()]
    check("step 1 lora_A gradients exactly 0 both sides (B = 0)", f"{len(a_names) - len(nonzero)}/{len(a_names)}",
          "all", not nonzero)
    b_names = [k for k in lora if ".lora_B." in k and k in ft_grads]
    errs = {k: rel(ft_grads[k].to(a.device).float(), lora[k].grad) for k in b_names}
    over = [k for k in b_names if errs[k] > max(a.grad_tol, 3.0 * drift.get(k, 0.0))]
    check("step 1 lora_B gradients, worst norm-wise", f"{max(errs.values()):.2e}", a.grad_tol, not over,
          f"over: {over[:3]}" if over else "")

    # 3. and 4. The same AdamW steps on PEFT's adapters, fp32 and under bf16 autocast.
    def curve(bf16):
        load_adapters(adapters0)
        model.zero_grad(set_to_none=True)
        opt = torch.optim.AdamW(list(lora.values()), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        losses = adamw_losses(forward, opt, list(lora.values()), batch, a.steps, a.device, bf16, clip=CLIP)
        return losses, {k: p.detach().clone() for k, p in lora.items()}

    fp32, fp32_final = curve(False)
    bf16, bf16_final = curve(True) if a.device == "cuda" else (fp32, fp32_final)
    relative = lambda x, y: abs(x - y) / abs(y)
    ft_curve = [ft_losses.get(s + 1, float("nan")) for s in range(a.steps)]
    for s in range(a.steps):
        print(f"    {s + 1:>4} ft {ft_curve[s]:>9.5f} PEFT fp32 {fp32[s]:>9.5f} bf16 {bf16[s]:>9.5f}")
    worst = max(relative(x, y) for x, y in zip(ft_curve, fp32))
    bf16_drift = max(relative(x, y) for x, y in zip(bf16, fp32))
    allowed = max(a.curve_tol, 2.0 * bf16_drift)
    check(f"loss curve, {a.steps} steps: ft against PEFT fp32", f"{worst:.2e}", f"{allowed:.2e}", worst <= allowed)
    check("the loss fell", f"{ft_curve[0]:.3f}->{ft_curve[-1]:.3f}", "", ft_curve[-1] < ft_curve[0])
    final = {k: files[k.replace("model.", "base_model.model.model.", 1)] if k.replace("model.", "base_model.model.model.", 1) in files else None
             for k in lora}
    missing = [k for k, v in final.items() if v is None]
    param_errs = {k: rel(v.to(a.device).float(), fp32_final[k]) for k, v in final.items() if v is not None}
    param_drift = max(rel(bf16_final[k], fp32_final[k]) for k in lora)
    param_allowed = max(a.param_tol, 3.0 * param_drift)
    worst_param = max(param_errs.values()) if param_errs else float("inf")
    check("final adapters in ft's files against PEFT's, worst", f"{worst_param:.2e}", f"{param_allowed:.2e}",
          not missing and worst_param <= param_allowed, f"missing {missing[:3]}" if missing else "")

    for f in failures:
        print("FAIL:", f)
    print(f"RESULT llama-lora-parity kernels={a.kernels} {'PASS' if not failures else 'FAIL'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
