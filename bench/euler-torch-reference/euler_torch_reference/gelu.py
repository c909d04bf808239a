"""gelu, torch:gelu-tanh: F.gelu(x, approximate="tanh") and the kernel its autograd calls,
aten.gelu_backward(dout, x, approximate="tanh")."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._tensors import activation_buffer, into, tensor


@dataclass
class Saved:
    x: torch.Tensor
    like: object


def forward(inputs, attrs, out=None):
    x = tensor(inputs["x"])
    return into(out, F.gelu(x, approximate="tanh"), inputs["x"]), Saved(x, inputs["x"])


def backward(saved, dout, grads):
    dx = torch.ops.aten.gelu_backward(tensor(dout), saved.x, approximate="tanh")
    return {"x": into(activation_buffer("gelu", grads, "x", saved.like), dx, saved.like)}
