"""crossentropy, torch:cross_entropy: F.cross_entropy(logits, targets, ignore_index=-1,
reduction="none") over the valid columns (logits[..., :n_valid]), losses in float32 (the spec's
output dtype; float64 for float64 logits); the backward is autograd's (log_softmax's and nll_loss's
backward kernels), zero in the padded columns.

PyTorch has no "valid columns" argument: where n_valid < V (GPT-2: 50257 of 50304) the slice is a
strided view, which log_softmax copies to contiguous first. That copy is part of what PyTorch costs
for this op as NanoEuler defines it, and it is in the reference's time.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._tensors import activation_buffer, into, tensor


@dataclass
class Saved:
    logits: torch.Tensor  # the input, as a leaf that requires grad
    losses: torch.Tensor  # (B,T) with its graph
    like: object


def forward(inputs, attrs, out=None):
    logits = tensor(inputs["logits"]).detach().requires_grad_()
    targets = tensor(inputs["targets"]).long()
    B, T, V = logits.shape
    n_valid = attrs["n_valid"] or V
    with torch.enable_grad():
        z = logits.reshape(B * T, V)[:, :n_valid]
        losses = F.cross_entropy(z, targets.reshape(-1), ignore_index=-1, reduction="none")
        losses = losses.to(torch.float64 if logits.dtype == torch.float64 else torch.float32).view(B, T)
    return into(out, losses.detach(), inputs["logits"]), Saved(logits, losses, inputs["logits"])


def backward(saved, dlosses, grads):
    (dlogits,) = torch.autograd.grad(saved.losses, saved.logits, tensor(dlosses), retain_graph=True)
    return {"logits": into(activation_buffer("crossentropy", grads, "logits", saved.like), dlogits, saved.like)}
