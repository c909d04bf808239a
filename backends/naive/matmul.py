"""matmul, naive: NumPy's `@` (which calls BLAS).

    out = x @ weight.T + bias                    x (N,K), weight (M,K), bias (M)

Backward, from d out[n,m] / d x[n,k] = weight[m,k] and d out[n,m] / d weight[m,k] = x[n,k]:

    dx = dout @ weight        dweight += dout.T @ x        dbias += sum_n dout
"""

from dataclasses import dataclass

import numpy as np

from ._out import into


@dataclass
class Saved:
    x: np.ndarray       # (N,K)
    weight: np.ndarray  # (M,K)
    has_bias: bool


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    y = x @ weight.T  # (N,M)
    if bias is not None:
        y += bias  # (M,) broadcast over rows
    return into(out, y), Saved(x, weight, bias is not None)


def backward(saved, dout, grads):
    result = {"x": into(grads.get("x"), dout @ saved.weight)}  # (N,M) @ (M,K) -> (N,K)
    grads["weight"] += dout.T @ saved.x                         # (M,N) @ (N,K) -> (M,K)
    result["weight"] = grads["weight"]
    if saved.has_bias:
        grads["bias"] += dout.sum(axis=0)  # (M,)
        result["bias"] = grads["bias"]
    return result
