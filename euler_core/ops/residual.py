"""residual: the skip connection, out = a + b (same shapes). Backward: da = db = dout."""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, nbytes, random_float


@dataclass(frozen=True)
class ResidualSpec(OpSpec):
    name: str = "residual"
    inputs: tuple = ("a", "b")
    differentiable: tuple = ("a", "b")
    attrs: dict = field(default_factory=dict)

    def check(self, inputs, attrs):
        sa = expect_array(self.name, "a", inputs["a"])
        sb = expect_array(self.name, "b", inputs["b"])
        if sa != sb:
            raise ValueError(f"residual: a and b must have the same shape, got {sa} and {sb}")
        expect_same_dtype(self.name, inputs, self.inputs)

    def output_shape(self, inputs, attrs):
        return tuple(inputs["a"].shape)

    def flops(self, inputs, attrs):
        return {"forward": inputs["a"].size, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        b = nbytes(inputs["a"])
        # backward as the model calls it (no activation buffers): both gradients are the output
        # gradient itself, handed back as is; nothing is read or written
        return {"forward": 3 * b, "backward": 0}

    def example(self, dims, dtype, rng):
        shape = (dims["N"], dims["C"])
        return {"a": random_float(rng, shape, dtype), "b": random_float(rng, shape, dtype)}, {}


SPEC = ResidualSpec()
