"""PyTorch FSDP2 peer for a Llama that does not fit one GPU: LlamaForCausalLM (transformers) of
Llama-3.1-8B's shape (32 layers, width 4096, 32 query and 8 KV heads, MLP 14,336, vocabulary
128,256, untied, RoPE theta 500,000 with Llama 3's scaling) with random weights, on random tokens,
one process a GPU, started by torchrun:

    torchrun --standalone --nproc_per_node N bench/peers/fsdp_llama.py [--seq 8192] [--ac selective]

It is set up as torchtitan trains Llama 3.1 8B:
- every decoder layer, then the whole model, wrapped by fully_shard (FSDP2: parameters, gradients
  and optimizer state sharded over the ranks; a layer's parameters all-gathered before its
  forward and backward, resharded after), bf16 parameters in compute and f32 gradient
  reduction (MixedPrecisionPolicy), f32 master weights;
- activation checkpointing per layer: --ac selective is torchtitan's per-op policy (the outputs
  of the attention and of every other matmul kept, the rest recomputed), full recomputes the
  layer, none keeps everything;
- each layer torch.compile'd (--compile 1), SDPA attention, fused AdamW (lr 3e-4, betas
  0.9/0.95, weight decay 0.1 on 2-D weights) after clipping at 1.0; the mean cross-entropy in f32.

Each step is timed with CUDA events after the warm-up (compilation happens there). Rank 0 prints
a RESULT line with the median ms, tok/s per GPU, MFU (ft's count: 6 FLOPs a parameter a token and
the attention's 6·L·NH·HS·T) and the largest peak memory of any rank; --json writes it.
--layers and --hidden shrink the model for a quick check (--device cpu runs it on Gloo).
"""
import argparse
import os
import statistics
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn.functional as F

from results import add_json_argument, device_name, write_results
from timing import time_steps

VOCAB = 128256


def llama_config(a):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                       num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                       max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=8192),
                       tie_word_embeddings=False, attn_implementation="sdpa", use_cache=False)


def selective_context():
    """torchtitan's per-op selective checkpointing: keep the attention's and the collectives'
    outputs and every other matmul's; recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    ops = torch.ops.aten
    keep = {ops.mm.default, ops._scaled_dot_product_efficient_attention.default,
            ops._scaled_dot_product_flash_attention.default, ops.max.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default}
    counts = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == ops.mm.default:
            counts[mode] += 1
        save = func in keep and not (func == ops.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def build(a, device):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    config = llama_config(a)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    layers = model.model.layers
    for i in range(len(layers)):
        layer = layers[i]
        if a.ac == "selective":
            layer = checkpoint_wrapper(layer, context_fn=selective_context, preserve_rng_state=False)
        elif a.ac == "full":
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        if a.compile:
            layer = torch.compile(layer)
        layers[i] = layer
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=device)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)  # the RMSNorm weights
            else:
                p.normal_(0.0, 0.02)
    # The rotary tables are a buffer computed at construction, left uninitialized by to_empty.
    model.model.rotary_emb = LlamaRotaryEmbedding(config=config, device=device)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (torch.compile compiles in the first)")
    ap.add_argument("--ac", default="selective", choices=["selective", "full", "none"])
    ap.add_argument("--compile", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    add_json_argument(ap)
    a = ap.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if a.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    model = build(a, device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=a.device == "cuda")
    gen = torch.Generator(device=device).manual_seed(1 + rank)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), device=device, generator=gen)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=device, generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times, loss = time_steps(step, a.warmup, a.steps, device=a.device, reset_peak_memory=a.device == "cuda")
    ms = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())  # DTensors: the global count
    tok_per_s = a.batch * a.seq / (ms / 1e3)  # per GPU
    flops = 6 * n + 6 * a.layers * a.heads * (a.hidden // a.heads) * a.seq
    mfu = flops * tok_per_s / 989e12
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 1e9 if a.device == "cuda" else 0.0], device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    loss_value = loss.item()
    if rank == 0:
        print(f"RESULT fsdp-llama torch=fsdp2{'+compile' if a.compile else ''} ac={a.ac} world={world} "
              f"ms={ms:.1f} tok_per_s_per_gpu={tok_per_s:.0f} mfu={mfu:.4f} peak_gb={peak.item():.2f} "
              f"loss={loss_value:.4f} params={n} B={a.batch} T={a.seq}", flush=True)
        if a.json:
            write_results(a.json, device_name(), [{"workload": f"llama-8b fsdp {world} GPUs B{a.batch} T{a.seq}",
                                                   "variant": f"torch fsdp2 compile ac={a.ac}", "ms": ms,
                                                   "tok_per_s": tok_per_s, "peak_gb": peak.item()}])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
