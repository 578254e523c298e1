"""The PyTorch side of the parity scripts' loss curves: AdamW steps on ft-gpt2's dumped batches,
in fp32 or under bf16 autocast, with clipping at a global norm. Shared by gpt2_parity.py and
lora_parity.py."""
import torch


def adamw_losses(model, opt, params, batch, steps, device, bf16, clip):
    """Runs `steps` steps of `opt` on model(*batch(s)) and returns each step's loss; `params` are
    the trained parameters, clipped together at global norm `clip`."""
    losses = []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        ids, targets = batch(s)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        losses.append(loss.item())
    return losses
