"""adamw, naive: the update of euler_core.ops.adamw written out line by line, in place."""

import numpy as np

from euler_core.ops.adamw import host_grad_scale, host_value


def forward(inputs, attrs, out=None):
    param, m, v = inputs["param"], inputs["m"], inputs["v"]
    scale = host_grad_scale(inputs, attrs)
    if scale is None:
        return None, None  # a NaN or Inf in the gradient: skip the step, change nothing
    g = inputs["grad"].astype(param.dtype) * scale
    beta1, beta2 = attrs["beta1"], attrs["beta2"]
    lr, t = host_value(attrs["lr"]), host_value(attrs["step"])
    m *= beta1
    m += (1.0 - beta1) * g
    v *= beta2
    v += (1.0 - beta2) * g * g
    m_hat = m / (1.0 - beta1 ** t)
    v_hat = v / (1.0 - beta2 ** t)
    param -= lr * (m_hat / (np.sqrt(v_hat) + attrs["eps"]) + attrs["weight_decay"] * param)
    if inputs.get("param_copy") is not None:
        inputs["param_copy"][...] = param  # the working copy, rounded to its dtype
    return None, None
