"""matmul_gelu: a linear layer with GPT-2's tanh GELU applied to its result (a fused op).

    pre = x @ weight.T + bias           x (N,K), weight (M,K), bias (M) or absent -> pre (N,M)
    out = gelu(pre)                     (N,M); gelu as in euler_core/ops/gelu.py:
                                        gelu(z) = 0.5 z (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)

It replaces `matmul` then `gelu`: GPT-2's MLP up-projection `gelu(c_fc(x))`. Fused, the GELU runs
on the GEMM's result while it is still in registers, so pre is never written and read back just to
be activated.

Backward, given dout (N,M). By the chain rule through gelu, then matmul's backward with dpre:

    dpre     = dout * gelu'(pre)        (N,M), gelu'(z) = 0.5 (1 + tanh(u)) + 0.5 z sech^2(u) du/dz,
                                               du/dz = sqrt(2/pi) (1 + 3 * 0.044715 z^2)
    dx       = dpre @ weight            (N,K)   overwritten
    dweight += dpre.T @ x               (M,K)   accumulated
    dbias   += sum_n dpre[n, :]         (M)     accumulated

What is saved for that is the variant's choice (opaque): pre, or gelu'(pre) itself (then the
backward's elementwise work is one multiply).

Example: y, saved = forward({"x": ln2, "weight": w_fc, "bias": b_fc}, {});
grads = backward(saved, dy, {"weight": dw_fc, "bias": db_fc}) -> {"x": dln2, "weight": ..., "bias": ...}.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import nbytes
from .matmul import MatmulSpec


@dataclass(frozen=True)
class MatmulGeluSpec(MatmulSpec):
    """matmul's inputs, checks and examples; the output is activated."""

    name: str = "matmul_gelu"
    replaces: tuple = ("matmul", "gelu")

    def flops(self, inputs, attrs):
        gelu = inputs["x"].shape[0] * inputs["weight"].shape[0]   # on the output, (N,M)
        matmul = super().flops(inputs, attrs)
        return {"forward": matmul["forward"] + 10 * gelu, "backward": matmul["backward"] + 20 * gelu}

    def bytes_moved(self, inputs, attrs):
        x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
        out = x.shape[0] * w.shape[0] * x.dtype.itemsize
        # forward: read x, W, b; write out and what the backward needs of pre (one (N,M) array).
        # backward: read dout and that array; then matmul's backward (x, W read; dx, dW, db written)
        return {"forward": nbytes(x, w, b) + 2 * out,
                "backward": 2 * out + 2 * nbytes(x) + 3 * nbytes(w) + 2 * nbytes(b)}


SPEC = MatmulGeluSpec()
