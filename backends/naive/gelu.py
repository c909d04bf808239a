"""gelu, naive: the tanh approximation and its derivative, elementwise.

    out = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
    d out / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
"""

import math
from dataclasses import dataclass

import numpy as np

from ._out import into

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # Python floats keep float32 arrays float32
CUBIC = 0.044715


@dataclass
class Saved:
    x: np.ndarray


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    u = SQRT_2_OVER_PI * (x + CUBIC * x * x * x)  # x * x * x: NumPy's float32 x ** 3 is ~100x slower
    y = 0.5 * x * (1.0 + np.tanh(u))
    return into(out, y), Saved(x)


def backward(saved, dout, grads):
    x = saved.x
    u = SQRT_2_OVER_PI * (x + CUBIC * x * x * x)
    tanh_u = np.tanh(u)
    du_dx = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x * x)
    dy_dx = 0.5 * (1.0 + tanh_u) + 0.5 * x * (1.0 - tanh_u * tanh_u) * du_dx
    return {"x": into(grads.get("x"), dout * dy_dx)}
