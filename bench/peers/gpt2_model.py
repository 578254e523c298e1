"""GPT-2 in plain PyTorch, built as fusedtrain's models/gpt2/gpt.cpp builds it and with its parameter
names (so ft-gpt2's safetensors load as they are): tied token embedding, learned positions,
pre-LayerNorm blocks, fused QKV projection, tanh GELU, final LayerNorm, mean cross-entropy.
Optional LoRA adapters (add_lora) as Hugging Face PEFT defines them, with ft's names. Attention
is SDPA's fused kernel, or with attention="naive" nanoGPT's non-flash path, one kernel per op.
Shared by tests/parity/gpt2_parity.py, tests/parity/lora_parity.py and bench/peers/gpt2_torch.py,
lora_torch.py."""
import math

import torch
import torch.nn.functional as F

# ft-gpt2's --lora-targets names and the linear of block h.{i} each adapts.
LORA_TARGETS = {"qkv": "attn.c_attn", "attn_proj": "attn.c_proj", "fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}


class GPT(torch.nn.Module):
    """GPT-2 as ft's models/gpt2/gpt.cpp builds it, with ft's parameter names. `attention` is "sdpa"
    (F.scaled_dot_product_attention, causal) or "naive" (scores, mask, softmax and the product with
    v as separate ops: what an unfused eager model runs)."""

    def __init__(self, vocab, block, layers, heads, channels, attention="sdpa"):
        super().__init__()
        if attention not in ("sdpa", "naive"):
            raise ValueError(f"attention must be sdpa or naive, not {attention!r}")
        self.heads = heads
        self.attention = attention
        if attention == "naive":
            # Built once and moved with the model (.cuda(), .to()), not rebuilt every step; not
            # persistent, so state_dict stays ft's parameters.
            self.register_buffer("mask", torch.ones(block, block, dtype=torch.bool).tril(), persistent=False)
        p = {}  # ft's names contain dots, which module attribute names cannot: registered as a_b_c
        c = channels
        p["wte.weight"] = torch.nn.Parameter(torch.empty(vocab, c))
        p["wpe.weight"] = torch.nn.Parameter(torch.empty(block, c))
        for l in range(layers):
            for name, shape in (("ln_1.weight", (c,)), ("ln_1.bias", (c,)), ("attn.c_attn.weight", (3 * c, c)),
                                ("attn.c_attn.bias", (3 * c,)), ("attn.c_proj.weight", (c, c)),
                                ("attn.c_proj.bias", (c,)), ("ln_2.weight", (c,)), ("ln_2.bias", (c,)),
                                ("mlp.c_fc.weight", (4 * c, c)), ("mlp.c_fc.bias", (4 * c,)),
                                ("mlp.c_proj.weight", (c, 4 * c)), ("mlp.c_proj.bias", (c,))):
                p[f"h.{l}.{name}"] = torch.nn.Parameter(torch.empty(*shape))
        p["ln_f.weight"] = torch.nn.Parameter(torch.empty(c))
        p["ln_f.bias"] = torch.nn.Parameter(torch.empty(c))
        for name, param in p.items():
            self.register_parameter(name.replace(".", "_"), param)
        self.p = p
        self.layers = layers
        self.lora = {}  # adapter parameters by ft name (h.{i}.attn.c_attn.lora_A.weight, ...); empty: no LoRA

    def add_lora(self, rank, alpha, targets=tuple(LORA_TARGETS), rslora=False, dropout=0.0, seed=0):
        """LoRA as PEFT's LoraLayer: freezes every base parameter and gives each `targets` linear
        (LORA_TARGETS' keys) of every block y = x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ, s = alpha/r
        (alpha/√r with rslora), with trainable fp32 A [r, in] (Kaiming-uniform, a = √5) and
        B [out, r] (zeros, so the model is unchanged until B trains)."""
        for param in self.p.values():
            param.requires_grad_(False)
        self.lora_scale = alpha / (math.sqrt(rank) if rslora else rank)
        self.lora_dropout = dropout
        g = torch.Generator(device="cpu").manual_seed(seed)
        for l in range(self.layers):
            for target in targets:
                module = f"h.{l}.{LORA_TARGETS[target]}"
                out_features, in_features = self.p[module + ".weight"].shape
                a = torch.empty(rank, in_features)
                torch.nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=g)
                device = self.p[module + ".weight"].device
                for name, value in (("lora_A.weight", a), ("lora_B.weight", torch.zeros(out_features, rank))):
                    param = torch.nn.Parameter(value.to(device))
                    self.register_parameter(f"{module}.{name}".replace(".", "_"), param)
                    self.lora[f"{module}.{name}"] = param

    def linear(self, x, module):
        """The linear `module` (e.g. h.0.attn.c_attn), with its LoRA adapter when it has one."""
        y = F.linear(x, self.p[module + ".weight"], self.p[module + ".bias"])
        a = self.lora.get(module + ".lora_A.weight")
        if a is None:
            return y
        x = F.dropout(x, self.lora_dropout, self.training)
        return y + self.lora_scale * F.linear(F.linear(x, a), self.lora[module + ".lora_B.weight"])

    def attend(self, q, k, v, t):
        """Causal attention of q, k, v [B, heads, t, hs]."""
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return att @ v

    def forward(self, ids, targets):
        p, b, t = self.p, ids.shape[0], ids.shape[1]
        c = p["wte.weight"].shape[1]
        x = p["wte.weight"][ids] + p["wpe.weight"][:t]
        for l in range(self.layers):
            h = lambda n: p[f"h.{l}.{n}"]
            linear = lambda z, n: self.linear(z, f"h.{l}.{n}")
            a = F.layer_norm(x, (c,), h("ln_1.weight"), h("ln_1.bias"), 1e-5)
            q, k, v = linear(a, "attn.c_attn").split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = self.attend(q, k, v, t).transpose(1, 2).reshape(b, t, c)
            x = x + linear(y, "attn.c_proj")
            m = F.layer_norm(x, (c,), h("ln_2.weight"), h("ln_2.bias"), 1e-5)
            m = F.gelu(linear(m, "mlp.c_fc"), approximate="tanh")
            x = x + linear(m, "mlp.c_proj")
        x = F.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
        logits = x @ p["wte.weight"].t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def init_gpt2_(model, seed=0):
    """GPT-2's initialization, as models/gpt2/gpt.cpp draws it (not the same numbers): N(0, 0.02²)
    weights, projections into the residual stream scaled by 1/√(2L), unit norm gains, zero biases."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.p.items():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("ln_f"):
                p.fill_(1.0)
            else:
                std = 0.02 / (2 * model.layers) ** 0.5 if name.endswith("c_proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)


def gpt2_adamw(model, **implementation):
    """The benchmarks' AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights only);
    `implementation` picks torch.optim.AdamW's (fused=True, foreach=True, ...)."""
    decay = [p for p in model.p.values() if p.dim() >= 2]
    rest = [p for p in model.p.values() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=6e-4,
                             betas=(0.9, 0.95), eps=1e-8, **implementation)


def gpt2_step(model, forward, opt, ids, targets):
    """One benchmark step as a function: bf16 autocast forward through `forward` (the model, or it
    compiled or wrapped), backward, clipping at 1.0, the optimizer's step; returns the loss."""
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return step
