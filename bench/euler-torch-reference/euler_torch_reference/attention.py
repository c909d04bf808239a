"""attention, torch:sdpa-*: F.scaled_dot_product_attention(q, k, v, is_causal=True), restricted to one
of PyTorch's backends per variant (cuDNN, FlashAttention-2, memory-efficient), as a PyTorch GPT
calls it after its fused qkv projection:

    q, k, v = qkv.view(B, T, 3, NH, HS).unbind(2), each transposed to (B, NH, T, HS) (strided views)
    y = sdpa(q, k, v, is_causal=True, scale=1/sqrt(HS)).transpose(1, 2).reshape(B, T, C)

The backward is autograd's: torch.autograd.grad(y, qkv, dout) runs the backend's backward kernel
and gathers dq, dk, dv into dqkv (B, T, 3C). The graph is kept (retain_graph), since the contract
lets a caller run backward more than once on one forward.

Head sizes that are not a multiple of 8 (the conformance suite's awkward HS=4, 5, 12) are zero-padded
to one, with the scale of the real head size: q.k and the output's first HS columns are unchanged.
PyTorch pads the same way inside its flash backend; cuDNN refuses such heads. GPT-2's HS=64 is
never padded.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ._tensors import activation_buffer, into, tensor


@dataclass
class Saved:
    qkv: torch.Tensor  # the input, as a leaf that requires grad
    y: torch.Tensor    # the output (B,T,C), with its graph
    like: object


class SDPA:
    """One SDPA backend as a variant (the module-level CUDNN, FLASH, EFFICIENT)."""

    def __init__(self, backend: SDPBackend):
        self.backend = backend

    def forward(self, inputs, attrs, out=None):
        qkv = tensor(inputs["qkv"]).detach().requires_grad_()
        B, T, C3 = qkv.shape
        NH = attrs["n_head"]
        HS = C3 // 3 // NH
        q, k, v = (t.transpose(1, 2) for t in qkv.view(B, T, 3, NH, HS).unbind(2))  # (B,NH,T,HS)
        pad = -HS % 8
        if pad:
            q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))
        with torch.enable_grad(), sdpa_kernel([self.backend]):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(HS))
        y = y[..., :HS].transpose(1, 2).reshape(B, T, NH * HS)  # (B,T,C)
        return into(out, y.detach(), inputs["qkv"]), Saved(qkv, y, inputs["qkv"])

    def backward(self, saved, dout, grads):
        (dqkv,) = torch.autograd.grad(saved.y, saved.qkv, tensor(dout), retain_graph=True)
        return {"qkv": into(activation_buffer("attention", grads, "qkv", saved.like), dqkv, saved.like)}


CUDNN = SDPA(SDPBackend.CUDNN_ATTENTION)
FLASH = SDPA(SDPBackend.FLASH_ATTENTION)
EFFICIENT = SDPA(SDPBackend.EFFICIENT_ATTENTION)
