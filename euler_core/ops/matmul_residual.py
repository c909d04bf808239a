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

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class MatmulResidualSpec(OpSpec):
    name: str = "matmul_residual"
    inputs: tuple = ("x", "weight", "bias", "residual")
    params: tuple = ("weight", "bias")
    differentiable: tuple = ("x", "weight", "bias", "residual")
    optional: tuple = ("bias",)
    attrs: dict = field(default_factory=dict)
    replaces: tuple = ("matmul", "residual")

    def check(self, inputs, attrs):
        N, K = expect_array(self.name, "x", inputs["x"], 2)
        M, K2 = expect_array(self.name, "weight", inputs["weight"], 2)
        if K2 != K:
            raise ValueError(f"{self.name}: x has {K} columns but weight (out, in) has {K2} inputs; "
                             f"expected weight of shape (M, {K})")
        if inputs.get("bias") is not None:
            expect_array(self.name, "bias", inputs["bias"], 1)
            expect_shape(self.name, "bias", inputs["bias"], (M,))
        residual = expect_array(self.name, "residual", inputs["residual"], 2)
        if residual != (N, M):
            raise ValueError(f"{self.name}: input 'residual' (the stream x @ weight.T + bias is added to) must have "
                             f"the output's shape (N, M) = {(N, M)}, got {residual}")
        expect_same_dtype(self.name, inputs, self.inputs)

    def output_shape(self, inputs, attrs):
        return (inputs["x"].shape[0], inputs["weight"].shape[0])

    def flops(self, inputs, attrs):
        N, K = inputs["x"].shape
        M = inputs["weight"].shape[0]
        bias = N * M if inputs.get("bias") is not None else 0
        # matmul's, plus the add to the stream (its backward passes dout on: nothing to compute)
        return {"forward": 2 * N * K * M + bias + N * M, "backward": 4 * N * K * M + bias}

    def bytes_moved(self, inputs, attrs):
        x, w, b, residual = inputs["x"], inputs["weight"], inputs.get("bias"), inputs["residual"]
        out = nbytes(residual)  # (N,M): out, or dout
        # forward: matmul's reads plus the stream's, one write of the new stream. backward: matmul's
        # (dresidual is dout itself, as the model calls it: nothing read or written for it)
        return {"forward": nbytes(x, w, b, residual) + out,
                "backward": out + 2 * nbytes(x) + 3 * nbytes(w) + 2 * nbytes(b)}

    def example(self, dims, dtype, rng):
        N, K, M = dims["N"], dims["K"], dims["M"]
        inputs = {"x": random_float(rng, (N, K), dtype),
                  "weight": random_float(rng, (M, K), dtype, scale=K ** -0.5)}
        if dims.get("bias", True):
            inputs["bias"] = random_float(rng, (M,), dtype)
        inputs["residual"] = random_float(rng, (N, M), dtype)
        return inputs, {}


SPEC = MatmulResidualSpec()
