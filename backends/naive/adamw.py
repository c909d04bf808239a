"""adamw, naive: the update of euler_core.ops.adamw written out line by line, in place."""

import numpy as np


def forward(inputs, attrs, out=None):
    param, m, v = inputs["param"], inputs["m"], inputs["v"]
    g = inputs["grad"].astype(param.dtype) * attrs["grad_scale"]
    beta1, beta2, t = attrs["beta1"], attrs["beta2"], attrs["step"]
    m *= beta1
    m += (1.0 - beta1) * g
    v *= beta2
    v += (1.0 - beta2) * g * g
    m_hat = m / (1.0 - beta1 ** t)
    v_hat = v / (1.0 - beta2 ** t)
    param -= attrs["lr"] * (m_hat / (np.sqrt(v_hat) + attrs["eps"]) + attrs["weight_decay"] * param)
    return None, None
