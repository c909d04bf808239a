"""gelu_matmul: GPT-2's tanh GELU applied to a linear layer's input (a fused op).

    h   = gelu(x)                   x (N,K) -> h (N,K); gelu as in euler_core/ops/gelu.py:
                                    gelu(z) = 0.5 z (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)
    out = h @ weight.T + bias       weight (M,K), bias (M) or absent -> out (N,M)

It replaces `gelu` then `matmul`: GPT-2's MLP down-projection `c_proj(gelu(pre))`, where pre is the
c_fc output. The forward is the composition's; what the fusion is for is the backward, where
gelu's derivative is applied to the projection's dx while that is still in registers (llm.c folds
the GELU backward into this GEMM's epilogue the same way), so d(h) is never written and read back
just to be multiplied.

Backward, given dout (N,M). matmul's backward with h as its input, then the chain rule through gelu:

    dweight += dout.T @ h           (M,K)   accumulated
    dbias   += sum_n dout[n, :]     (M)     accumulated
    dh       = dout @ weight        (N,K)
    dx       = dh * gelu'(x)        (N,K)   overwritten; gelu'(z) = 0.5 (1 + tanh(u)) + 0.5 z sech^2(u) du/dz,
                                            du/dz = sqrt(2/pi) (1 + 3 * 0.044715 z^2)

What is saved is the variant's choice (opaque): x and h, or x alone with h remade.

Example: y, saved = forward({"x": fch, "weight": w_proj, "bias": b_proj}, {});
grads = backward(saved, dy, {"weight": dw_proj, "bias": db_proj}) -> {"x": dfch, "weight": ..., "bias": ...}.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import nbytes
from .matmul import MatmulSpec


@dataclass(frozen=True)
class GeluMatmulSpec(MatmulSpec):
    """matmul's inputs, checks and examples; the input is activated first."""

    name: str = "gelu_matmul"
    replaces: tuple = ("gelu", "matmul")

    def flops(self, inputs, attrs):
        gelu = inputs["x"].size   # on the input, (N,K)
        matmul = super().flops(inputs, attrs)
        return {"forward": matmul["forward"] + 10 * gelu, "backward": matmul["backward"] + 20 * gelu}

    def bytes_moved(self, inputs, attrs):
        x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
        out = x.shape[0] * w.shape[0] * x.dtype.itemsize
        # forward: read x, write h, read h, W, b, write out. backward: read dout, W, h (dW) and x
        # (gelu'), write dx; dW, db read and written
        return {"forward": 3 * nbytes(x) + nbytes(w, b) + out,
                "backward": 2 * out + 3 * nbytes(x) + 3 * nbytes(w) + 2 * nbytes(b)}


SPEC = GeluMatmulSpec()
