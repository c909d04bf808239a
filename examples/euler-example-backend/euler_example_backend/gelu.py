"""gelu, `example:sigmoid`: GPT-2's tanh-approximated GELU written through the logistic sigmoid.

Since 0.5 (1 + tanh(u)) = sigmoid(2u), with u = sqrt(2/pi) (x + 0.044715 x^3):

    out = x * s,                 s = sigmoid(2u) = 1 / (1 + exp(-2u))
    dx  = dout * (s + 2 x s (1 - s) du/dx),     du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)

(1 - tanh(u)^2 = 4 s (1 - s), so this is the naive backend's derivative rewritten.) How it differs
from the naive variant: one exp instead of a tanh, and the work goes in chunks of CHUNK elements so
the temporaries stay in cache instead of making full-size intermediate arrays. 2u is clipped to
[-60, 60] before the exp, where sigmoid is 0 or 1 to float64 precision, so float32 never overflows.
It does not fuse with anything and uses one thread.
"""

import math
from dataclasses import dataclass

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # Python floats keep float32 arrays float32
CUBIC = 0.044715
CHUNK = 16384  # elements per chunk: a few 64 KiB temporaries


@dataclass
class Saved:
    x: np.ndarray  # the input, any shape (N,C) in GPT-2


def _sigmoid_2u(x):
    """sigmoid(2u) for a chunk x (1-D)."""
    u2 = np.clip(2.0 * SQRT_2_OVER_PI * (x + CUBIC * x * x * x), -60.0, 60.0)
    s = 1.0 / (1.0 + np.exp(-u2))
    return s


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    flat_x = np.ascontiguousarray(x).reshape(-1)                 # (N*C,)
    y = np.empty_like(flat_x)                                    # (N*C,)
    for i in range(0, flat_x.size, CHUNK):
        xc = flat_x[i:i + CHUNK]
        y[i:i + CHUNK] = xc * _sigmoid_2u(xc)
    y = y.reshape(x.shape)
    if out is None:
        return y, Saved(x)
    out[...] = y                                                 # every element written
    return out, Saved(x)


def backward(saved, dout, grads):
    flat_x = np.ascontiguousarray(saved.x).reshape(-1)           # (N*C,)
    flat_d = np.ascontiguousarray(dout).reshape(-1)              # (N*C,)
    dx = np.empty_like(flat_x)                                   # (N*C,)
    for i in range(0, flat_x.size, CHUNK):
        xc = flat_x[i:i + CHUNK]
        s = _sigmoid_2u(xc)
        du_dx = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * xc * xc)
        dx[i:i + CHUNK] = flat_d[i:i + CHUNK] * (s + 2.0 * xc * s * (1.0 - s) * du_dx)
    dx = dx.reshape(saved.x.shape)
    buf = grads.get("x")
    if buf is None:
        return {"x": dx}
    buf[...] = dx                                                # activation gradients are overwritten
    return {"x": buf}
