"""embedding: token plus position embedding, GPT-2's input layer.

    out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]

tokens (B,T) integer, wte (V,C), wpe (maxT,C) -> out (B,T,C). The backward scatters: every position
adds its output gradient to the row of the token it read and to the row of its position,

    dwte[tokens[b, t], :] += dout[b, t, :]        dwpe[t, :] += sum_b dout[b, t, :]

(several positions holding the same token all add to one row: a scatter-add, not an assignment).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..numerics import param_grad_dtype
from .base import OpSpec, expect_array, expect_same_dtype, nbytes, random_float


@dataclass(frozen=True)
class EmbeddingSpec(OpSpec):
    name: str = "embedding"
    inputs: tuple = ("tokens", "wte", "wpe")
    params: tuple = ("wte", "wpe")
    differentiable: tuple = ("wte", "wpe")
    attrs: dict = field(default_factory=dict)

    def check(self, inputs, attrs):
        B, T = expect_array(self.name, "tokens", inputs["tokens"], 2, kind="int")
        V, C = expect_array(self.name, "wte", inputs["wte"], 2)
        maxT, C2 = expect_array(self.name, "wpe", inputs["wpe"], 2)
        expect_same_dtype(self.name, inputs, ("wte", "wpe"))
        if C2 != C:
            raise ValueError(f"embedding: wte has {C} channels but wpe has {C2}")
        if T > maxT:
            raise ValueError(f"embedding: sequence length T={T} exceeds the {maxT} positions of wpe")
        tokens = inputs["tokens"]
        if isinstance(tokens, np.ndarray) and tokens.size:
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < 0 or hi >= V:
                raise ValueError(f"embedding: token ids must lie in [0, {V}), got values in [{lo}, {hi}]")

    def output_shape(self, inputs, attrs):
        B, T = inputs["tokens"].shape
        return (B, T, inputs["wte"].shape[1])

    def output_dtype(self, inputs, attrs):
        return str(inputs["wte"].dtype)

    def flops(self, inputs, attrs):
        B, T = inputs["tokens"].shape
        C = inputs["wte"].shape[1]
        return {"forward": B * T * C, "backward": 2 * B * T * C}

    def bytes_moved(self, inputs, attrs):
        """Forward: the ids, the wte rows read, wpe, out. Backward: the ids, dout, and a dwte row read
        and written per position, dwpe read and written, the gradients at their own dtype (float32
        under mixed precision: param_grad_dtype)."""
        B, T = inputs["tokens"].shape
        wte = inputs["wte"]
        C, s = wte.shape[1], wte.dtype.itemsize
        g = np.dtype(param_grad_dtype(str(wte.dtype))).itemsize
        act = B * T * C * s
        return {"forward": nbytes(inputs["tokens"]) + 2 * act + T * C * s,
                "backward": nbytes(inputs["tokens"]) + act + 2 * B * T * C * g + 2 * T * C * g}

    def example(self, dims, dtype, rng):
        B, T, C, V = dims["B"], dims["T"], dims["C"], dims.get("V", 50)
        maxT = dims.get("maxT", T)
        return ({"tokens": rng.integers(0, V, size=(B, T)).astype(np.int32),
                 "wte": random_float(rng, (V, C), dtype),
                 "wpe": random_float(rng, (maxT, C), dtype)}, {})


SPEC = EmbeddingSpec()
