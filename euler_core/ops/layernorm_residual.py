"""layernorm_residual: the residual add fused with the layernorm that follows it (a fused op).

Two outputs: the new residual stream, which the rest of the model still needs, and its layernorm:

    x = a + b                                  a, b (N,C) -> x (N,C)    the residual stream
    y = layernorm(x; weight, bias, eps)        weight, bias (C)  -> y (N,C)

(layernorm's math is in euler_core/ops/layernorm.py). It replaces `residual` then `layernorm`:
GPT-2's `x = x + attn(...)` followed by `ln_2(x)`, and `x = x + mlp(...)` followed by the next
block's `ln_1(x)` (or `ln_f` after the last block), as llm.c's fused residual forward does. Fused,
x is written once and never read back for the layernorm: one pass over a, b instead of two.

`b` is optional. Without it the stream already holds the sum (its producer added it: a projection
that wrote stream + x W^T + b from its GEMM's epilogue, matmul_residual or mlp with a residual), and

    x = a                                      the very input array, not a copy: nothing is written
    y = layernorm(a; weight, bias, eps)

so the op is a layernorm whose first output is its input (`OpSpec.aliases`: {"x": "a"}). Its `out`
is then None or (a, y_out): out[0] must be `a` itself (any other array is refused: writing a copy
there would be the very pass over (N,C) that the producer's fusion saves).

Backward, given (dx, dy) for the two outputs. x reaches the loss along two paths, directly (dx:
the residual stream's own gradient from further on) and through y; a and b each reach x with
derivative 1, so

    da = db = dx + layernorm_backward(dy)      (N,C)  overwritten (dx None: the stream's gradient is
                                                      zero, e.g. after the last block, where x feeds
                                                      only ln_f)
    dweight += sum_n dy * xhat,  dbias += sum_n dy    (C)  accumulated, as layernorm's

Without b the same holds for a alone (x = a: derivative 1), and the returned dict has no "b".
Saved: x (N,C) and the per-row mean and rstd (N), as layernorm's.

Example: (x, y), saved = forward({"a": x_in, "b": proj, "weight": w, "bias": b}, {"eps": 1e-5});
grads = backward(saved, (dx_stream, dy), {"weight": dw, "bias": db}); grads["a"] is grads["b"] may hold.
Without b: (x, y), saved = forward({"a": stream, "weight": w, "bias": b}, {"eps": 1e-5}, out=(stream, y_buf))
gives x is stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class LayerNormResidualSpec(OpSpec):
    name: str = "layernorm_residual"
    inputs: tuple = ("a", "b", "weight", "bias")
    params: tuple = ("weight", "bias")
    differentiable: tuple = ("a", "b", "weight", "bias")
    output: str = "x, y"
    outputs: tuple = ("x", "y")
    attrs: dict = field(default_factory=lambda: {"eps": 1e-5})
    optional: tuple = ("b",)
    replaces: tuple = ("residual", "layernorm")

    def check(self, inputs, attrs):
        N, C = expect_array(self.name, "a", inputs["a"], 2)
        if inputs.get("b") is not None:
            expect_array(self.name, "b", inputs["b"], 2)
            expect_shape(self.name, "b", inputs["b"], (N, C))
        for name in ("weight", "bias"):
            expect_array(self.name, name, inputs[name], 1)
            expect_shape(self.name, name, inputs[name], (C,))
        expect_same_dtype(self.name, inputs, self.inputs)
        if not attrs["eps"] > 0:
            raise ValueError(f"{self.name}: eps must be positive, got {attrs['eps']}")

    def output_shape(self, inputs, attrs):
        shape = tuple(inputs["a"].shape)
        return (shape, shape)

    def output_dtype(self, inputs, attrs):
        dt = str(inputs["a"].dtype)
        return (dt, dt)

    def aliases(self, inputs):
        return {} if inputs.get("b") is not None else {"x": "a"}

    def flops(self, inputs, attrs):
        N, C = inputs["a"].shape
        add = N * C if inputs.get("b") is not None else 0
        return {"forward": 8 * N * C + add, "backward": 15 * N * C}

    def bytes_moved(self, inputs, attrs):
        a = inputs["a"]
        N, C = a.shape
        stats = 2 * N * 4
        params = 2 * C * a.dtype.itemsize
        # forward: read a, b; write x, y (without b: read a, write y; x is a). backward: read x, dy,
        # dx; write da (db is the same array)
        passes = 4 if inputs.get("b") is not None else 2
        return {"forward": passes * nbytes(a) + params + stats, "backward": 4 * nbytes(a) + 3 * params + stats}

    def example(self, dims, dtype, rng):
        N, C = dims["N"], dims["C"]
        inputs = {"a": random_float(rng, (N, C), dtype, scale=2.0) + 0.3}
        if dims.get("b", True):  # "b": False, the stream that already holds the sum
            inputs["b"] = random_float(rng, (N, C), dtype)
        inputs.update(weight=random_float(rng, (C,), dtype) * 0.5 + 1.0, bias=random_float(rng, (C,), dtype) * 0.5)
        return inputs, {}


SPEC = LayerNormResidualSpec()
