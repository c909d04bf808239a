"""classifier_crossentropy: the tied classifier fused with the cross-entropy loss (a fused op), so
that the (N, Vp) logits and probabilities never exist in memory all at once.

x (N,C), weight (Vp,C), targets (N) int (-1: no loss there) -> losses (N) float32 (float64 for
float64 x). Only the first `n_valid` columns (the real vocabulary; default all Vp) take part:

    logits = x @ weight.T                                   (N,Vp), never stored whole
    losses[n] = logsumexp_{v < n_valid} logits[n, v] - logits[n, targets[n]]     (0 where targets[n] = -1)

It replaces `matmul` (the tied lm_head, weight = wte) then `crossentropy` (euler_core/ops/
crossentropy.py has the loss's math). At GPT-2's Vp = 50304 and N = B*T = 65536 those logits would
be 6.6 GB in bf16, and their gradient as much again.

The gradient is given ahead. In training the gradient of the total loss with respect to each
position's loss is known before the forward (for the mean over the valid positions, valid[n] /
count * loss_scale), so it is an input, `dlosses` (N) in the losses' dtype (the spec's
`grad_input`). Given it, the forward computes the input gradients while each piece of the logits
exists (an implementation works through the rows in chunks, reusing one chunk's buffer):

    dlogits[n, v] = dlosses[n] * (softmax(logits[n, :n_valid])[v] - [v == targets[n]])
                    (0 in the padded columns v >= n_valid and on ignored rows)
    dx      = dlogits @ weight             (N,C)    kept in `saved`
    dweight = dlogits.T @ x                (Vp,C)   kept in `saved` (float32 or wider)

and `backward(saved, grad_output, grads)` only accumulates: grads["weight"] += dweight (so it may be
called more than once, and the forward never touches `grads`), and returns dx (copied into
grads["x"] when that buffer is given). grad_output must be None or the very `dlosses` array given
to the forward. Without `dlosses` (evaluation) the forward computes the losses alone and saves
nothing for a backward, which is then refused.

The check of this op (conformance) is the gradient of sum(losses * R) with R given as dlosses.

Example (training): losses, saved = forward({"x": lnf, "weight": wte, "targets": t, "dlosses": d},
{"n_valid": 50257}); grads = backward(saved, None, {"weight": dwte}) -> {"x": dlnf, "weight": dwte}.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import OpSpec, dtype_name, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class ClassifierCrossEntropySpec(OpSpec):
    name: str = "classifier_crossentropy"
    inputs: tuple = ("x", "weight", "targets", "dlosses")
    params: tuple = ("weight",)
    differentiable: tuple = ("x", "weight")
    optional: tuple = ("dlosses",)
    output: str = "losses"
    grad_input: str = "dlosses"
    attrs: dict = field(default_factory=lambda: {"n_valid": None})
    replaces: tuple = ("matmul", "crossentropy")

    def check(self, inputs, attrs):
        N, C = expect_array(self.name, "x", inputs["x"], 2)
        Vp, C2 = expect_array(self.name, "weight", inputs["weight"], 2)
        if C2 != C:
            raise ValueError(f"{self.name}: x has {C} channels but weight (Vp, C) has {C2}; "
                             f"expected weight of shape (Vp, {C})")
        expect_same_dtype(self.name, inputs, ("x", "weight"))
        expect_array(self.name, "targets", inputs["targets"], 1, kind="int")
        expect_shape(self.name, "targets", inputs["targets"], (N,))
        n_valid = attrs["n_valid"]
        if n_valid is not None and not (isinstance(n_valid, (int, np.integer)) and 1 <= n_valid <= Vp):
            raise ValueError(f"{self.name}: n_valid must be an int in [1, {Vp}], got {n_valid!r}")
        dlosses = inputs.get("dlosses")
        if dlosses is not None:
            expect_array(self.name, "dlosses", dlosses, 1)
            expect_shape(self.name, "dlosses", dlosses, (N,))
            want = self.output_dtype(inputs, attrs)
            if dtype_name(dlosses) != want:
                raise TypeError(f"{self.name}: dlosses must have the losses' dtype {want}, got {dtype_name(dlosses)}")
        targets = inputs["targets"]
        V = Vp if n_valid is None else n_valid
        if isinstance(targets, np.ndarray) and targets.size:  # device targets are not read back (no sync)
            lo, hi = int(targets.min()), int(targets.max())
            if lo < -1 or hi >= V:
                raise ValueError(f"{self.name}: targets must lie in [0, {V}) or be -1 (ignored), "
                                 f"got values in [{lo}, {hi}]")

    def output_shape(self, inputs, attrs):
        return (inputs["x"].shape[0],)

    def output_dtype(self, inputs, attrs):
        return "float64" if dtype_name(inputs["x"]) == "float64" else "float32"

    def flops(self, inputs, attrs):
        N, C = inputs["x"].shape
        Vp = inputs["weight"].shape[0]
        if inputs.get("dlosses") is None:  # the logits GEMM and the logsumexp
            return {"forward": 2 * N * C * Vp + 5 * N * Vp, "backward": 0}
        # three GEMMs (logits, dx, dweight) and the softmax with its gradient; backward adds dweight
        return {"forward": 6 * N * C * Vp + 9 * N * Vp, "backward": Vp * C}

    def bytes_moved(self, inputs, attrs):
        x, w, t, d = inputs["x"], inputs["weight"], inputs["targets"], inputs.get("dlosses")
        N, C = x.shape
        losses = N * (8 if dtype_name(x) == "float64" else 4)
        if d is None:
            return {"forward": nbytes(x, w, t) + losses, "backward": 0}
        dweight = w.shape[0] * C * 4  # at least float32
        return {"forward": nbytes(x, w, t, d) + losses + nbytes(x) + dweight, "backward": 3 * dweight}

    def example(self, dims, dtype, rng):
        """dims: N rows, C channels, V (the padded vocabulary Vp), optionally n_valid < V."""
        N, C, V = dims["N"], dims["C"], dims["V"]
        n_valid = dims.get("n_valid", V)
        targets = rng.integers(0, n_valid, size=(N,)).astype(np.int32)
        targets[rng.random(N) < 0.2] = -1  # some positions ignored, as in SFT
        loss_dtype = "float64" if dtype == "float64" else "float32"
        return ({"x": random_float(rng, (N, C), dtype), "weight": random_float(rng, (V, C), dtype, scale=3 * C ** -0.5),
                 "targets": targets, "dlosses": random_float(rng, (N,), loss_dtype)},
                {"n_valid": None if n_valid == V else n_valid})


SPEC = ClassifierCrossEntropySpec()
