"""AdamW over the model's flat parameter buffer, through the `adamw` op, plus the learning-rate
schedule (linear warmup, then cosine decay to a floor) and gradient clipping."""

from __future__ import annotations

import math

from .model import GPT


class AdamW:
    """Decoupled weight decay on the 2-D weights only (they fill the first part of the buffer)."""

    def __init__(self, model: GPT, weight_decay: float = 0.1, betas=(0.9, 0.95), eps: float = 1e-8):
        self.model = model
        self.weight_decay = weight_decay
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.m = model.xp.zeros_like(model.flat_params)
        self.v = model.xp.zeros_like(model.flat_params)
        self.step_count = 0

    def step(self, lr: float, grad_scale: float = 1.0) -> None:
        """One update of every parameter from model.flat_grads (times grad_scale)."""
        self.step_count += 1
        model, n = self.model, self.model.num_decayed
        attrs = {"lr": lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                 "step": self.step_count, "grad_scale": grad_scale}
        adamw = model.kernels["adamw"]
        for part, decay in ((slice(0, n), self.weight_decay), (slice(n, None), 0.0)):
            adamw.forward({"param": model.flat_params[part], "grad": model.flat_grads[part],
                           "m": self.m[part], "v": self.v[part]}, {**attrs, "weight_decay": decay})


def clip_scale(grad_norm: float, max_norm: float) -> float:
    """The factor that scales a gradient of norm `grad_norm` down to `max_norm` (1 if within)."""
    if max_norm <= 0 or grad_norm <= max_norm or not math.isfinite(grad_norm):
        return 1.0
    return max_norm / grad_norm


def learning_rate(step: int, max_lr: float, warmup: int, total: int, min_lr_frac: float = 0.1) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to min_lr_frac * max_lr at `total`.
    `step` counts from 0."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if total <= warmup:
        return max_lr
    progress = min(1.0, (step - warmup) / (total - warmup))
    min_lr = max_lr * min_lr_frac
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
