"""residual, cupy_raw: out = a + b in one pass; the backward hands dout on (residual.cu).

Without buffers, the backward returns `dout` itself for both a and b (no copy, as naive does: the
caller treats returned gradients as read-only); with buffers in `grads`, it copies into them.
"""

import numpy as np

from . import _common
from . import _runtime as rt


def _launch(kernel: str, arrays: tuple, n: int, xp) -> None:
    vec = _common.vector_ok(*arrays)
    items = n // (16 // arrays[0].dtype.itemsize) if vec else n
    k = rt.function("residual", kernel, {"floatX": _common.ctype(arrays[0])})
    rt.launch(k, _common.elementwise_grid(max(items, 1), xp) if n else 0, _common.ELEMENTWISE_THREADS,
              arrays + (np.int64(n), np.int32(vec)))


def forward(inputs, attrs, out=None):
    a, b = inputs["a"], inputs["b"]
    _common.check_float("residual", "a", a)
    _common.check_contiguous("residual", a=a, b=b)
    xp = _common.xp_of(a)
    y = _common.output("residual", xp, out, a.shape, str(a.dtype))
    _launch("residual_forward", (a, b, y), a.size, xp)
    return y, None


def copy_into(src, dst):
    """dst[...] = src for two contiguous arrays of one shape and dtype."""
    _launch("residual_copy", (src, dst), src.size, _common.xp_of(src))
    return dst


def backward(saved, dout, grads):
    _common.check_contiguous("residual", dout=dout)
    result = {}
    for name in ("a", "b"):
        if grads.get(name) is None:
            result[name] = dout
        else:
            buf = _common.grad_buffer("residual", grads, name, dout, _common.xp_of(dout))
            result[name] = copy_into(dout, buf)
    return result
