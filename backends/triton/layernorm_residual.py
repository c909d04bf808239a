"""layernorm_residual, triton: the residual add and the layernorm in one pass each way, on the
layernorm kernels of layernorm.py with their residual switches (no kernel of its own).

Forward: each program loads its rows of a and b, writes x = a + b (rounded to the storage dtype,
as the residual op would round it) and normalises it while it is in registers: one read of a and b
and one write of x and y, against residual's read-read-write plus layernorm's read of x and write
of y unfused (4 passes over (N,C) instead of 5). Saved: x, mean, rstd, as layernorm's. Without b
(the stream already holds the sum: its projection added it) it is layernorm's own forward on a, and x
is a itself (2 passes: read a, write y).

Backward: layernorm's pipelined backward, which also loads the stream's gradient dx and stores
da = dx + layernorm_backward(dy) (4 passes instead of layernorm's 3 plus residual's 3); with dx None
(the stream after the last block) it is layernorm's backward alone. db is the same array as da
(without buffers both are returned as one array, like the residual op's backward; with buffers for
both, the second is a copy). Where the caller passes grads["a"] aliasing dx, the kernel reads each
element of dx before it writes da there, so the update in place is safe in this variant (the
contract does not promise it for others).
"""

from dataclasses import dataclass

from . import _common, layernorm
from ._runtime import xp_of
from .residual import copy_into

OP = "layernorm_residual"


@dataclass
class Saved:
    layernorm: layernorm.Saved  # x, weight, mean, rstd
    has_b: bool                 # False: x was a itself, and there is no db


def forward(inputs, attrs, out=None):
    a, b, w, bias = inputs["a"], inputs.get("b"), inputs["weight"], inputs["bias"]
    _common.check_float(OP, "a", a)
    _common.check_contiguous(OP, a=a, b=b, weight=w, bias=bias)
    xp = xp_of(a)
    x_out, y_out = out if out is not None else (None, None)
    y = _common.output(OP, xp, y_out, a.shape, a.dtype, name="out[1] (y)")
    if b is None:  # the stream already holds the sum: x is a (out[0], if given, is a itself)
        return (a, y), Saved(layernorm.normalize(a, w, bias, y, attrs["eps"], op=OP), False)
    x = _common.output(OP, xp, x_out, a.shape, a.dtype, name="out[0] (x)")
    saved = layernorm.normalize(x, w, bias, y, attrs["eps"], residual=(a, b), op=OP)
    return (x, y), Saved(saved, True)


def backward(saved, grad_output, grads):
    dstream, dy = grad_output
    _common.check_contiguous(OP, dx=dstream, dy=dy)
    x = saved.layernorm.x
    xp = xp_of(x)
    if not saved.has_b:  # x was a: its gradient alone
        d = _common.grad_buffer(OP, grads, "a", x, xp)
        dw, db = layernorm.normalize_backward(saved.layernorm, dy, d, grads, dresidual=dstream, op=OP)
        return {"a": d, "weight": dw, "bias": db}
    first, second = ("a", "b") if grads.get("a") is not None or grads.get("b") is None else ("b", "a")
    d = _common.grad_buffer(OP, grads, first, x, xp)
    other = None if grads.get(second) is None else _common.grad_buffer(OP, grads, second, x, xp)
    dw, db = layernorm.normalize_backward(saved.layernorm, dy, d, grads, dresidual=dstream, op=OP)
    return {first: d, second: d if other is None else copy_into(d, other), "weight": dw, "bias": db}
