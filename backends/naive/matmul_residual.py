"""matmul_residual, naive: the linear layer and the residual add composed from their naive kernels.

    p = x @ weight.T + bias      (matmul.py)          out = residual + p      (residual.py)

Backward: out's gradient reaches p and the stream alike (the add's derivative is 1 for both), so
matmul's backward turns dout into dx, dweight and dbias, and the stream's gradient is dout itself
(residual's backward: no copy unless grads["residual"] is given).
"""

from . import matmul, residual


def forward(inputs, attrs, out=None):
    p, saved = matmul.forward({"x": inputs["x"], "weight": inputs["weight"], "bias": inputs.get("bias")}, {})  # (N,M)
    y, _ = residual.forward({"a": inputs["residual"], "b": p}, {}, out)                                       # (N,M)
    return y, saved  # matmul's Saved: x, weight, has_bias


def backward(saved, dout, grads):
    result = matmul.backward(saved, dout, {k: v for k, v in grads.items() if k != "residual"})  # dx, dW, db
    result["residual"] = residual.backward(None, dout, {"a": grads.get("residual")})["a"]      # dout
    return result
