"""matmul_gelu, naive: the linear layer and the GELU composed from their naive kernels.

    pre = x @ weight.T + bias      (matmul.py)          out = gelu(pre)      (gelu.py)

Backward: gelu's backward turns dout into dpre = dout * gelu'(pre); matmul's backward turns dpre
into dx, dweight and dbias.
"""

from dataclasses import dataclass

from . import gelu, matmul


@dataclass
class Saved:
    matmul: matmul.Saved  # x, weight, has_bias
    gelu: gelu.Saved      # pre (N,M)


def forward(inputs, attrs, out=None):
    pre, s_matmul = matmul.forward(inputs, {})   # (N,M)
    y, s_gelu = gelu.forward({"x": pre}, {}, out)  # (N,M)
    return y, Saved(s_matmul, s_gelu)


def backward(saved, dout, grads):
    dpre = gelu.backward(saved.gelu, dout, {})["x"]  # (N,M)
    return matmul.backward(saved.matmul, dpre, grads)
