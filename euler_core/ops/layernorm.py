"""layernorm: normalise each row to zero mean and unit variance, then scale and shift.

    mean = sum_c x[n, c] / C          var = sum_c (x[n, c] - mean)^2 / C        rstd = 1 / sqrt(var + eps)
    xhat[n, c] = (x[n, c] - mean) * rstd
    out[n, c]  = xhat[n, c] * weight[c] + bias[c]

x (N,C), weight (C), bias (C) -> out (N,C); eps = 1e-5 as in GPT-2. The backward, with
g[n, c] = dout[n, c] * weight[c]:

    dbias[c]   += sum_n dout[n, c]
    dweight[c] += sum_n dout[n, c] * xhat[n, c]
    dx[n, c]    = rstd * (g[n, c] - mean_c(g[n, :]) - xhat[n, c] * mean_c(g[n, :] * xhat[n, :]))

(the two means subtract the components of g along the directions that the mean and the variance
of the row remove: docs/walkthrough/ derives it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class LayerNormSpec(OpSpec):
    name: str = "layernorm"
    inputs: tuple = ("x", "weight", "bias")
    params: tuple = ("weight", "bias")
    differentiable: tuple = ("x", "weight", "bias")
    attrs: dict = field(default_factory=lambda: {"eps": 1e-5})

    def check(self, inputs, attrs):
        N, C = expect_array(self.name, "x", inputs["x"], 2)
        expect_array(self.name, "weight", inputs["weight"], 1)
        expect_array(self.name, "bias", inputs["bias"], 1)
        expect_shape(self.name, "weight", inputs["weight"], (C,))
        expect_shape(self.name, "bias", inputs["bias"], (C,))
        expect_same_dtype(self.name, inputs, self.inputs)
        if not attrs["eps"] > 0:
            raise ValueError(f"layernorm: eps must be positive, got {attrs['eps']}")

    def output_shape(self, inputs, attrs):
        return tuple(inputs["x"].shape)

    def flops(self, inputs, attrs):
        N, C = inputs["x"].shape
        return {"forward": 8 * N * C, "backward": 14 * N * C}

    def bytes_moved(self, inputs, attrs):
        x = inputs["x"]
        N, C = x.shape
        stats = 2 * N * 4
        params = 2 * C * x.dtype.itemsize
        return {"forward": 2 * nbytes(x) + params + stats,
                "backward": 3 * nbytes(x) + 3 * params + stats}

    def example(self, dims, dtype, rng):
        N, C = dims["N"], dims["C"]
        return ({"x": random_float(rng, (N, C), dtype, scale=2.0) + 0.3,
                 "weight": random_float(rng, (C,), dtype) * 0.5 + 1.0,
                 "bias": random_float(rng, (C,), dtype) * 0.5}, {})


SPEC = LayerNormSpec()
