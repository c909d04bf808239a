"""layernorm_residual, naive: the residual add and the layernorm composed from their naive kernels.

    x = a + b                  (residual.py)          y = layernorm(x)      (layernorm.py)

Backward, with (dx, dy) the gradients of the two outputs: a and b both reach x with derivative 1,
and x reaches the loss directly (dx) and through y, so

    da = db = dx + layernorm_backward(dy)        (dx None: zero)

and layernorm's backward accumulates dweight and dbias.
"""

from . import layernorm, residual
from ._out import into


def forward(inputs, attrs, out=None):
    x_out, y_out = out if out is not None else (None, None)
    x, _ = residual.forward({"a": inputs["a"], "b": inputs["b"]}, {}, x_out)                      # (N,C)
    y, saved = layernorm.forward({"x": x, "weight": inputs["weight"], "bias": inputs["bias"]}, attrs, y_out)
    return (x, y), saved  # layernorm's Saved: x, weight, mean, rstd


def backward(saved, grad_output, grads):
    dx_stream, dy = grad_output                                                     # (N,C) each
    dln = layernorm.backward(saved, dy, {"weight": grads["weight"], "bias": grads["bias"]})["x"]
    d = dln if dx_stream is None else dx_stream + dln                               # (N,C)
    return {"a": into(grads.get("a"), d), "b": into(grads.get("b"), d),
            "weight": grads["weight"], "bias": grads["bias"]}
