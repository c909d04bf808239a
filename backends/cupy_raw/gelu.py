"""gelu, cupy_raw: the tanh GELU in one pass each way (gelu.cu has the math and the kernels).

Differs from naive only in where it runs: a grid-stride loop of 16-byte packs (8 bf16 or 4 float32
elements per load), computed in float32, each element read once and written once.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt


@dataclass
class Saved:
    x: object  # any shape: the input


def _defines(x) -> dict:
    return {"floatX": _common.ctype(x)}


def _launch(kernel: str, arrays: tuple, n: int, xp) -> None:
    vec = _common.vector_ok(*arrays)
    per_pack = 16 // arrays[0].dtype.itemsize
    items = n // per_pack if vec else n
    k = rt.function("gelu", kernel, _defines(arrays[0]))
    rt.launch(k, _common.elementwise_grid(max(items, 1), xp) if n else 0, _common.ELEMENTWISE_THREADS,
              arrays + (np.int64(n), np.int32(vec)))


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    _common.check_float("gelu", "x", x)
    _common.check_contiguous("gelu", x=x)
    xp = _common.xp_of(x)
    y = _common.output("gelu", xp, out, x.shape, str(x.dtype))
    _launch("gelu_forward", (x, y), x.size, xp)
    return y, Saved(x)


def backward(saved, dout, grads):
    x = saved.x
    _common.check_contiguous("gelu", dout=dout)
    xp = _common.xp_of(x)
    dx = _common.grad_buffer("gelu", grads, "x", x, xp)
    _launch("gelu_backward", (x, dout, dx), x.size, xp)
    return {"x": dx}
