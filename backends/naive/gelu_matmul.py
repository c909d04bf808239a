"""gelu_matmul, naive: the GELU and the linear layer composed from their naive kernels.

    h = gelu(x)      (gelu.py)          out = h @ weight.T + bias      (matmul.py)

Backward: matmul's backward turns dout into dh, dweight and dbias; gelu's backward turns dh into
dx = dh * gelu'(x).
"""

from dataclasses import dataclass

from . import gelu, matmul


@dataclass
class Saved:
    gelu: gelu.Saved      # x (N,K)
    matmul: matmul.Saved  # h, weight, has_bias


def forward(inputs, attrs, out=None):
    h, s_gelu = gelu.forward({"x": inputs["x"]}, {})                       # (N,K)
    y, s_matmul = matmul.forward({**inputs, "x": h}, {}, out)              # (N,M)
    return y, Saved(s_gelu, s_matmul)


def backward(saved, dout, grads):
    result = matmul.backward(saved.matmul, dout, {k: v for k, v in grads.items() if k != "x"})  # dh, dW, db
    result["x"] = gelu.backward(saved.gelu, result["x"], {"x": grads.get("x")})["x"]           # dx = dh * gelu'(x)
    return result
