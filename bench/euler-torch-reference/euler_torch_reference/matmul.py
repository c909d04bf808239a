"""matmul, torch:cublas: cuBLAS through PyTorch, as a PyTorch linear layer runs it.

    out = x @ weight.T + bias        torch.addmm(bias, x, weight.T)    (torch.matmul without bias)
    dx  = dout @ weight              torch.matmul (into the buffer when given)
    dweight += dout.T @ x            dweight.addmm_(dout.T, x): cuBLAS adds into the buffer (beta = 1);
                                     a float32 dweight of 16-bit inputs (mixed precision) gets
                                     dweight.add_(dout.T @ x), the 16-bit product, as autocast does
    dbias   += sum_n dout            dbias.add_(dout.sum(0))
"""

from dataclasses import dataclass

import torch

from ._tensors import activation_buffer, array, tensor


@dataclass
class Saved:
    x: torch.Tensor       # (N,K)
    weight: torch.Tensor  # (M,K)
    has_bias: bool
    like: object          # an input array: the kind of array to hand back


def forward(inputs, attrs, out=None):
    x, w = tensor(inputs["x"]), tensor(inputs["weight"])
    bias = inputs.get("bias")
    if out is not None:
        y = tensor(out)
        if bias is None:
            torch.matmul(x, w.t(), out=y)
        else:
            torch.addmm(tensor(bias), x, w.t(), out=y)
        result = out
    else:
        result = array(torch.matmul(x, w.t()) if bias is None else torch.addmm(tensor(bias), x, w.t()),
                       inputs["x"])
    return result, Saved(x, w, bias is not None, inputs["x"])


def backward(saved, dout, grads):
    dy = tensor(dout)
    buf = activation_buffer("matmul", grads, "x", saved.like)
    if buf is not None:
        torch.matmul(dy, saved.weight, out=tensor(buf))
        dx = buf
    else:
        dx = array(torch.matmul(dy, saved.weight), saved.like)
    dW = tensor(grads["weight"])
    if dW.dtype == dy.dtype:
        dW.addmm_(dy.t(), saved.x)
    else:  # float32 gradients of 16-bit inputs: the 16-bit product added in, as under torch.autocast
        dW.add_(torch.mm(dy.t(), saved.x))
    result = {"x": dx, "weight": grads["weight"]}
    if saved.has_bias:
        tensor(grads["bias"]).add_(dy.sum(0))
        result["bias"] = grads["bias"]
    return result
