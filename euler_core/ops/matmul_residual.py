"""matmul_residual: a linear layer whose result is added to the residual stream (a fused op).

    p   = x @ weight.T + bias           x (N,K), weight (M,K), bias (M) or absent -> p (N,M)
    out = residual + p                  residual (N,M) the stream -> out (N,M) the new stream

It replaces `matmul` then `residual`: GPT-2's `x = x + c_proj(y)` after the attention (and after
the MLP where the MLP is composed). Fused, the GEMM reads the stream's tile in its epilogue and
writes the new stream directly: p is never written and read back just to be added. The layernorm
after it then only normalises that stream (layernorm_residual without `b`).

Arithmetic in 16-bit storage: the composition's. p is rounded to the storage dtype as matmul would
store it, then residual + p is computed in float32 and rounded once, as the residual op rounds its
sum (so a fused variant is bitwise the composition wherever its GEMM is matmul's).

Backward, given dout (N,M). out is linear in p and in residual with derivative 1 each, so p's
gradient is dout and matmul's backward does the rest:

    dx        = dout @ weight           (N,K)   overwritten
    dweight  += dout.T @ x              (M,K)   accumulated
    dbias    += sum_n dout[n, :]        (M)     accumulated
    dresidual = dout                    (N,M)   dout itself (no copy, like the residual op's
                                                backward), or copied into grads["residual"] when
                                                the caller passes that buffer

Saved: the variant's choice (opaque); typically x and the weight, as matmul's.

Example: y, saved = forward({"x": att, "weight": w, "bias": b, "residual": stream}, {});
grads = backward(saved, dy, {"weight": dw, "bias": db, "x": datt}) -> {"x": datt, "weight": dw,
"bias": db, "residual": dy}.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import expect_array, nbytes, random_float
from .matmul import MatmulSpec


@dataclass(frozen=True)
class MatmulResidualSpec(MatmulSpec):
    """matmul's inputs, checks and example, and the stream it adds itself to."""

    name: str = "matmul_residual"
    inputs: tuple = ("x", "weight", "bias", "residual")
    differentiable: tuple = ("x", "weight", "bias", "residual")
    replaces: tuple = ("matmul", "residual")

    def check(self, inputs, attrs):
        super().check(inputs, attrs)  # x, weight, bias, and every input's dtype
        out = (inputs["x"].shape[0], inputs["weight"].shape[0])
        residual = expect_array(self.name, "residual", inputs["residual"], 2)
        if residual != out:
            raise ValueError(f"{self.name}: input 'residual' (the stream x @ weight.T + bias is added to) must have "
                             f"the output's shape (N, M) = {out}, got {residual}")

    def flops(self, inputs, attrs):
        counts = super().flops(inputs, attrs)
        N, M = inputs["residual"].shape
        # matmul's, plus the add to the stream (its backward passes dout on: nothing to compute)
        return {"forward": counts["forward"] + N * M, "backward": counts["backward"]}

    def bytes_moved(self, inputs, attrs):
        counts = super().bytes_moved(inputs, attrs)
        # forward: matmul's, plus the stream read (the new stream is written where matmul wrote its
        # output). backward: matmul's (dresidual is dout itself, as the model calls it)
        return {"forward": counts["forward"] + nbytes(inputs["residual"]), "backward": counts["backward"]}

    def example(self, dims, dtype, rng):
        inputs, attrs = super().example(dims, dtype, rng)
        inputs["residual"] = random_float(rng, (dims["N"], dims["M"]), dtype)
        return inputs, attrs


SPEC = MatmulResidualSpec()
