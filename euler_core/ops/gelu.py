"""gelu: GPT-2's GELU, the tanh approximation, elementwise.

    out = 0.5 * x * (1 + tanh(u)),      u = sqrt(2/pi) * (x + 0.044715 x^3)

The backward, by the product rule, with sech^2(u) = 1 - tanh(u)^2:

    dx = dout * (0.5 * (1 + tanh(u)) + 0.5 * x * sech^2(u) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, nbytes, random_float


@dataclass(frozen=True)
class GeluSpec(OpSpec):
    name: str = "gelu"
    inputs: tuple = ("x",)
    differentiable: tuple = ("x",)
    attrs: dict = field(default_factory=dict)

    def check(self, inputs, attrs):
        expect_array(self.name, "x", inputs["x"])

    def output_shape(self, inputs, attrs):
        return tuple(inputs["x"].shape)

    def flops(self, inputs, attrs):
        n = inputs["x"].size
        return {"forward": 10 * n, "backward": 20 * n}

    def bytes_moved(self, inputs, attrs):
        b = nbytes(inputs["x"])
        return {"forward": 2 * b, "backward": 3 * b}

    def example(self, dims, dtype, rng):
        return {"x": random_float(rng, (dims["N"], dims["C"]), dtype, scale=2.0)}, {}


SPEC = GeluSpec()
