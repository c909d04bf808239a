"""layernorm, naive: NumPy over rows.

Forward, per row n of x (N,C):  xhat = (x - mean) * rstd,  out = xhat * weight + bias.

Backward. out depends on weight and bias directly, so dbias = sum_n dout and
dweight = sum_n dout * xhat. For dx, let g = dout * weight (the gradient reaching xhat). Since
xhat_c = (x_c - mean) * rstd, with d mean / d x_j = 1/C and d rstd / d x_j = -rstd^3 (x_j - mean) / C,

    d xhat_c / d x_j = rstd * ([c == j] - 1/C - xhat_c * xhat_j / C)

and summing g_c times that over c:

    dx_j = rstd * (g_j - mean_c(g_c) - xhat_j * mean_c(g_c * xhat_c))
"""

from dataclasses import dataclass

import numpy as np

from ._out import into


@dataclass
class Saved:
    x: np.ndarray       # (N,C) the input
    weight: np.ndarray  # (C,)
    mean: np.ndarray    # (N,) per-row mean
    rstd: np.ndarray    # (N,) per-row 1/sqrt(var + eps)


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs["bias"]
    mean = x.mean(axis=1, keepdims=True)                # (N,1)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)  # (N,1) biased variance, as in GPT-2
    rstd = 1.0 / np.sqrt(var + attrs["eps"])            # (N,1)
    xhat = (x - mean) * rstd                            # (N,C)
    y = xhat * weight + bias                            # (N,C)
    return into(out, y), Saved(x, weight, mean[:, 0], rstd[:, 0])


def backward(saved, dout, grads):
    mean, rstd = saved.mean[:, None], saved.rstd[:, None]  # (N,1)
    xhat = (saved.x - mean) * rstd                         # (N,C)
    grads["bias"] += dout.sum(axis=0)                      # (C,)
    grads["weight"] += (dout * xhat).sum(axis=0)           # (C,)
    g = dout * saved.weight                                # (N,C)
    dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    return {"x": into(grads.get("x"), dx), "weight": grads["weight"], "bias": grads["bias"]}
