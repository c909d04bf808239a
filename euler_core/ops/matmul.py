"""matmul: a linear layer in llm.c's layout, weight (out, in).

    out = x @ weight.T + bias          x (N,K), weight (M,K), bias (M) or absent -> out (N,M)

The backward of y = x W^T + b, given dout (N,M):

    dx       = dout @ weight           (N,K)   overwritten
    dweight += dout.T @ x              (M,K)   accumulated
    dbias   += sum_n dout[n, :]        (M)     accumulated
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class MatmulSpec(OpSpec):
    name: str = "matmul"
    inputs: tuple = ("x", "weight", "bias")
    params: tuple = ("weight", "bias")
    differentiable: tuple = ("x", "weight", "bias")
    optional: tuple = ("bias",)
    attrs: dict = field(default_factory=dict)

    def check(self, inputs, attrs):
        N, K = expect_array(self.name, "x", inputs["x"], 2)
        M, K2 = expect_array(self.name, "weight", inputs["weight"], 2)
        if K2 != K:
            raise ValueError(f"{self.name}: x has {K} columns but weight (out, in) has {K2} inputs; "
                             f"expected weight of shape (M, {K})")
        if inputs.get("bias") is not None:
            expect_array(self.name, "bias", inputs["bias"], 1)
            expect_shape(self.name, "bias", inputs["bias"], (M,))
        expect_same_dtype(self.name, inputs, self.inputs)

    def output_shape(self, inputs, attrs):
        return (inputs["x"].shape[0], inputs["weight"].shape[0])

    def flops(self, inputs, attrs):
        N, K = inputs["x"].shape
        M = inputs["weight"].shape[0]
        bias = inputs.get("bias") is not None
        return {"forward": 2 * N * K * M + (N * M if bias else 0),
                "backward": 4 * N * K * M + (N * M if bias else 0)}

    def bytes_moved(self, inputs, attrs):
        x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
        out = x.shape[0] * w.shape[0] * x.dtype.itemsize
        return {"forward": nbytes(x, w, b) + out,
                "backward": out + 2 * nbytes(x) + 3 * nbytes(w) + 2 * nbytes(b)}

    def example(self, dims, dtype, rng):
        N, K, M = dims["N"], dims["K"], dims["M"]
        inputs = {"x": random_float(rng, (N, K), dtype),
                  "weight": random_float(rng, (M, K), dtype, scale=K ** -0.5)}
        if dims.get("bias", True):
            inputs["bias"] = random_float(rng, (M,), dtype)
        return inputs, {}


SPEC = MatmulSpec()
