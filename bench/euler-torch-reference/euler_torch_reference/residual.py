"""residual, torch:add: out = a + b with torch.add; the backward hands dout on (copied into buffers
when the caller gives them), as the naive backend's does."""

import torch

from ._tensors import activation_buffer, array, tensor


def forward(inputs, attrs, out=None):
    a, b = tensor(inputs["a"]), tensor(inputs["b"])
    if out is None:
        return array(torch.add(a, b), inputs["a"]), None
    torch.add(a, b, out=tensor(out))
    return out, None


def backward(saved, dout, grads):
    result = {}
    for name in ("a", "b"):
        buf = activation_buffer("residual", grads, name, dout)
        if buf is None:
            result[name] = dout
        else:
            tensor(buf).copy_(tensor(dout))
            result[name] = buf
    return result
