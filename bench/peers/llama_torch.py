"""PyTorch peer for `ft-bench llama`: training steps of a Llama-3.2-1B-shaped LlamaForCausalLM
(transformers) with random weights (16 layers, width 2048, 32 query and 8 KV heads, MLP 8192,
vocabulary 128,256, tied, RoPE theta 500,000 with Llama 3's scaling) on random tokens, B 4, T 2048.

- full (llama-1b): fp32 master weights with bf16 autocast, SDPA attention, fused AdamW (lr 6e-4,
  betas 0.9/0.95, weight decay 0.1 on 2-D weights), clipping at 1.0, as ft-bench llama's step.
- --lora 1 (lora-llama-1b): PEFT's get_peft_model with LoRA r 16 (alpha 32, dropout 0) on
  q, k, v, o, gate, up and down_proj; the base frozen in bf16, adapters in fp32 trained by fused
  AdamW after clipping at 1.0; the forward under bf16 autocast.

The model's forward and the mean cross-entropy run torch.compile'd (--mode compile) or eager.
--attention sdpa (the default) runs transformers' SDPA attention, one flash kernel; --attention
eager its matmul, softmax and matmul, the same ops as ft's unfused mode runs, which is the peer
that mode is measured against.
Each step is timed with CUDA events after a warm-up; prints a RESULT line with the median ms,
tok/s, MFU (ft's count: 4 FLOPs a parameter a token, 2 more a trainable one, and the attention's
6·L·NH·HS·T) and the peak memory of the timed steps; --json writes them for ft-bench --peers.

    python3 bench/peers/llama_torch.py --mode compile
    python3 bench/peers/llama_torch.py --mode compile --lora 1
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

from results import add_json_argument, device_name, write_results
from timing import time_steps

VOCAB = 128256


def llama_1b_config(layers, attention="sdpa"):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=8192),
                       tie_word_embeddings=True, attn_implementation=attention, use_cache=False)


def workload(a):
    """As ft-bench llama names it: llama-1b (lora-llama-1b) only at its own shapes."""
    base = "lora-llama-1b" if a.lora else "llama-1b"
    if (a.batch, a.seq, a.layers) == (4, 2048, 16) and (not a.lora or a.rank == 16):
        return base
    return f"{base} B{a.batch} T{a.seq} L{a.layers}" + (f" r{a.rank}" if a.lora else "")


def build(a):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_1b_config(a.layers, a.attention))
    if not a.lora:
        model = model.cuda()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
        return model, model, groups
    from peft import LoraConfig, get_peft_model
    model = model.to(device="cuda", dtype=torch.bfloat16)
    peft = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"]))
    trainable = [p for p in peft.parameters() if p.requires_grad]
    for p in trainable:
        p.data = p.data.float()
    return model, peft, [{"params": trainable, "weight_decay": 0.1}]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--mode", default="compile", choices=["compile", "eager"])
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"],
                    help="transformers' attention: SDPA, or eager (matmul, softmax, matmul: the ops ft's unfused "
                         "mode runs)")
    ap.add_argument("--lora", type=int, default=0, help="1: LoRA fine-tuning through PEFT (lora-llama-1b)")
    ap.add_argument("--rank", type=int, default=16)
    add_json_argument(ap)
    a = ap.parse_args()
    base, model, groups = build(a)
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    params = [p for g in groups for p in g["params"]]

    def loss_of(ids, targets):
        logits = model(input_ids=ids).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    forward = torch.compile(loss_of) if a.mode == "compile" else loss_of
    ids = torch.randint(0, VOCAB, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, VOCAB, (a.batch, a.seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    times, loss = time_steps(step, a.warmup, a.steps, reset_peak_memory=True)
    ms = statistics.median(times)
    n = sum(p.numel() for p in base.parameters())
    trained = sum(p.numel() for p in params)
    if a.lora:  # PEFT's adapters are among the base's parameters: count the frozen ones as N
        n -= trained
    tok_per_s = a.batch * a.seq / (ms / 1e3)
    flops = 4 * (n + (trained if a.lora else 0)) + 2 * trained + 6 * a.layers * 2048 * a.seq
    mfu = flops * tok_per_s / 989e12
    peak_gb = torch.cuda.max_memory_allocated() / 1e9
    name = "lora-llama" if a.lora else "llama"
    torch_run = a.mode + ("" if a.attention == "sdpa" else "-attention-eager")
    print(f"RESULT {name} torch={torch_run} ms={ms:.3f} tok_per_s={tok_per_s:.0f} mfu={mfu:.4f} "
          f"peak_gb={peak_gb:.3f} loss={loss.item():.4f} params={n} trained={trained}", flush=True)
    if a.json:
        write_results(a.json, device_name(), [{"workload": workload(a), "variant": f"torch {torch_run}" +
                                               (" peft" if a.lora else ""), "ms": ms, "tok_per_s": tok_per_s,
                                               "peak_gb": peak_gb}])


if __name__ == "__main__":
    main()
