"""AdamW over the model's flat parameter buffer, through the `adamw` op, plus the learning-rate
schedule (linear warmup, then cosine decay to a floor) and gradient clipping."""

from __future__ import annotations

import math

from .model import GPT


class AdamW:
    """Decoupled weight decay on the 2-D weights only (they fill the first part of the buffer).

    The state (m, v) has the master weights' dtype: float32 in mixed precision, where each update
    also refreshes the model's 16-bit working copy of the weights (adamw's param_copy)."""

    def __init__(self, model: GPT, weight_decay: float = 0.1, betas=(0.9, 0.95), eps: float = 1e-8):
        self.model = model
        self.weight_decay = weight_decay
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.m = model.xp.zeros_like(model.flat_master)
        self.v = model.xp.zeros_like(model.flat_master)
        self.step_count = 0

    def step(self, lr: float, grad_scale: float = 1.0) -> None:
        """One update of every parameter from model.flat_grads (times grad_scale), counted."""
        self.step_count += 1
        self.update(lr, self.step_count, grad_scale=grad_scale)

    def update(self, lr, step, grad_scale: float = 1.0, grad_sumsq=None, max_norm: float = 0.0) -> None:
        """The update of optimizer step number `step` (>= 1), not counted (the caller counts).

        With `grad_sumsq` (the `sumsq` of the whole gradient, a (1,) array on the device) and
        max_norm > 0 the gradient is clipped to that norm on the device, and a non-finite norm skips
        the update. `lr` and `step` may be device scalars, (1,) float32 arrays, as in a step captured
        in a CUDA graph (euler_core/step.py)."""
        model, n = self.model, self.model.num_decayed
        attrs = {"lr": lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                 "step": step, "grad_scale": grad_scale, "max_norm": max_norm}
        adamw = model.kernels["adamw"]
        for part, decay in ((slice(0, n), self.weight_decay), (slice(n, None), 0.0)):
            inputs = {"param": model.flat_master[part], "grad": model.flat_grads[part],
                      "m": self.m[part], "v": self.v[part]}
            if model.mixed:
                inputs["param_copy"] = model.flat_params[part]
            if grad_sumsq is not None:
                inputs["grad_sumsq"] = grad_sumsq
            adamw.forward(inputs, {**attrs, "weight_decay": decay})


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
