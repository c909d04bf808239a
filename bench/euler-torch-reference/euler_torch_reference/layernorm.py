"""layernorm, torch:layer_norm: the kernels of F.layer_norm and of its autograd,

    out, mean, rstd = aten.native_layer_norm(x, (C,), weight, bias, eps)
    dx, dweight, dbias = aten.native_layer_norm_backward(dout, x, (C,), mean, rstd, weight, bias)

The parameter gradients come back as new tensors and are added into the caller's buffers (as
autograd adds into .grad).
"""

from dataclasses import dataclass

import torch

from ._tensors import activation_buffer, into, tensor


@dataclass
class Saved:
    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    mean: torch.Tensor
    rstd: torch.Tensor
    like: object


def forward(inputs, attrs, out=None):
    x, w, b = tensor(inputs["x"]), tensor(inputs["weight"]), tensor(inputs["bias"])
    y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), w, b, attrs["eps"])
    return into(out, y, inputs["x"]), Saved(x, w, b, mean, rstd, inputs["x"])


def backward(saved, dout, grads):
    s = saved
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(tensor(dout), s.x, (s.x.shape[-1],), s.mean, s.rstd,
                                                           s.weight, s.bias, [True, True, True])
    tensor(grads["weight"]).add_(dw)
    tensor(grads["bias"]).add_(db)
    return {"x": into(activation_buffer("layernorm", grads, "x", s.like), dx, s.like), "weight": grads["weight"], "bias": grads["bias"]}
