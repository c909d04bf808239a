"""adamw, torch:fused: torch._fused_adamw_, the kernel torch.optim.AdamW(fused=True) runs, on one
flat tensor, in place:

    param <- param * (1 - lr * weight_decay) - lr * m_hat / (sqrt(v_hat) + eps)

which is the spec's update (the decay term uses the parameter before the update in both). The spec's
grad_scale multiplies the gradient (clipping); PyTorch's fused kernel can only divide it (AMP
unscaling) and then writes the result back into grad, which the contract forbids; so a scale other
than 1 is applied to a copy of the gradient first, as clip_grad_norm_ would in place.
"""

import torch

from ._tensors import tensor


def forward(inputs, attrs, out=None):
    p, g, m, v = (tensor(inputs[k]) for k in ("param", "grad", "m", "v"))
    if attrs["grad_scale"] != 1.0:
        g = g * attrs["grad_scale"]
    if g.dtype != p.dtype:
        g = g.to(p.dtype)
    step = torch.tensor(float(attrs["step"]), dtype=torch.float32, device=p.device)
    torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=attrs["lr"], beta1=attrs["beta1"], beta2=attrs["beta2"],
                        weight_decay=attrs["weight_decay"], eps=attrs["eps"], amsgrad=False, maximize=False)
    return None, None

