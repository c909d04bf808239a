"""sumsq: the sum of the squares of every element of an array, into a (1,) array.

    out[0] = sum_i x_i^2          (accumulated in float32, float64 for float64 input)

The core calls it once per optimizer step on the whole flat gradient buffer: sqrt(out[0]) is the
global gradient norm that clipping needs (adamw's `grad_sumsq`) and that the metrics log records.
It stays on the device: the step never waits for it. A variant must sum in a fixed order (bitwise
repeatable results, whatever the threads do). No backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, dtype_name, expect_array, nbytes, random_float


@dataclass(frozen=True)
class SumsqSpec(OpSpec):
    name: str = "sumsq"
    inputs: tuple = ("x",)
    attrs: dict = field(default_factory=dict)

    def check(self, inputs, attrs):
        expect_array(self.name, "x", inputs["x"])

    def output_shape(self, inputs, attrs):
        return (1,)

    def output_dtype(self, inputs, attrs):
        return "float64" if dtype_name(inputs["x"]) == "float64" else "float32"

    def flops(self, inputs, attrs):
        return {"forward": 2 * inputs["x"].size, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        return {"forward": nbytes(inputs["x"]), "backward": 0}

    def example(self, dims, dtype, rng):
        return {"x": random_float(rng, (dims["N"],), dtype)}, {}


SPEC = SumsqSpec()
