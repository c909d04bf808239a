"""crossentropy: per-position softmax cross-entropy of the logits against the targets.

logits (B,T,Vp), targets (B,T) integer -> losses (B,T). Only the first `n_valid` columns (the real
vocabulary; default all Vp) take part: the padded columns of llm.c's padded vocabulary are ignored.
A target of -1 marks a position that has no loss (prompt tokens in SFT, padding): its loss is 0 and
its logits get no gradient.

    m = max_v logits[b, t, v]
    lse = m + log(sum_v exp(logits[b, t, v] - m))        the logsumexp, computed stably
    losses[b, t] = lse - logits[b, t, targets[b, t]]

The backward, given dlosses (B,T) (for the mean loss, 1/number-of-valid-positions each):

    dlogits[b, t, v] = dlosses[b, t] * (softmax(logits[b, t])[v] - [v == targets[b, t]])

and 0 in the padded columns and at ignored positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import OpSpec, expect_array, nbytes, random_float


@dataclass(frozen=True)
class CrossEntropySpec(OpSpec):
    name: str = "crossentropy"
    inputs: tuple = ("logits", "targets")
    differentiable: tuple = ("logits",)
    output: str = "losses"
    attrs: dict = field(default_factory=lambda: {"n_valid": None})

    def check(self, inputs, attrs):
        B, T, Vp = expect_array(self.name, "logits", inputs["logits"], 3)
        Bt, Tt = expect_array(self.name, "targets", inputs["targets"], 2, kind="int")
        if (Bt, Tt) != (B, T):
            raise ValueError(f"{self.name}: targets must have shape {(B, T)} to match logits, got {(Bt, Tt)}")
        n_valid = attrs["n_valid"]
        if n_valid is not None and not (1 <= n_valid <= Vp):
            raise ValueError(f"{self.name}: n_valid must lie in [1, {Vp}], got {n_valid}")
        targets = inputs["targets"]
        V = Vp if n_valid is None else n_valid
        if isinstance(targets, np.ndarray) and targets.size:
            lo, hi = int(targets.min()), int(targets.max())
            if lo < -1 or hi >= V:
                raise ValueError(f"{self.name}: targets must lie in [0, {V}) or be -1 (ignored), "
                                 f"got values in [{lo}, {hi}]")

    def output_shape(self, inputs, attrs):
        return tuple(inputs["targets"].shape)

    def output_dtype(self, inputs, attrs):
        dt = str(inputs["logits"].dtype)
        return "float64" if dt == "float64" else "float32"

    def flops(self, inputs, attrs):
        n = inputs["logits"].size
        return {"forward": 5 * n, "backward": 4 * n}

    def bytes_moved(self, inputs, attrs):
        logits, targets = inputs["logits"], inputs["targets"]
        rows = targets.size * 4
        return {"forward": nbytes(logits, targets) + rows, "backward": 2 * nbytes(logits) + nbytes(targets) + rows}

    def example(self, dims, dtype, rng):
        B, T, V = dims["B"], dims["T"], dims["V"]
        n_valid = dims.get("n_valid", V)
        targets = rng.integers(0, n_valid, size=(B, T)).astype(np.int32)
        targets[rng.random((B, T)) < 0.2] = -1  # some positions ignored, as in SFT
        return ({"logits": random_float(rng, (B, T, V), dtype, scale=3.0), "targets": targets},
                {"n_valid": None if n_valid == V else n_valid})


SPEC = CrossEntropySpec()
