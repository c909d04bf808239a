"""layernorm_residual, naive: the residual add and the layernorm composed from their naive kernels.

    x = a + b                  (residual.py)          y = layernorm(x)      (layernorm.py)

Without b the stream already holds the sum: x is a itself (nothing written; a given out[0] is a,
the dispatcher makes sure) and y = layernorm(a).

Backward, with (dx, dy) the gradients of the two outputs: a and b both reach x with derivative 1,
and x reaches the loss directly (dx) and through y, so

    da = db = dx + layernorm_backward(dy)        (dx None: zero)

and layernorm's backward accumulates dweight and dbias. Without b, da alone.
"""

from dataclasses import dataclass

from . import layernorm, residual
from ._out import into


@dataclass
class Saved:
    layernorm: layernorm.Saved  # x, weight, mean, rstd
    has_b: bool                 # False: x was a itself, and there is no db


def forward(inputs, attrs, out=None):
    x_out, y_out = out if out is not None else (None, None)
    a, b = inputs["a"], inputs.get("b")
    x = a if b is None else residual.forward({"a": a, "b": b}, {}, x_out)[0]                    # (N,C)
    y, saved = layernorm.forward({"x": x, "weight": inputs["weight"], "bias": inputs["bias"]}, attrs, y_out)
    return (x, y), Saved(saved, b is not None)


def backward(saved, grad_output, grads):
    dx_stream, dy = grad_output                                                     # (N,C) each
    dln = layernorm.backward(saved.layernorm, dy, {"weight": grads["weight"], "bias": grads["bias"]})["x"]
    d = dln if dx_stream is None else dx_stream + dln                               # (N,C)
    result = {"a": into(grads.get("a"), d), "weight": grads["weight"], "bias": grads["bias"]}
    if saved.has_b:
        result["b"] = into(grads.get("b"), d)
    return result
