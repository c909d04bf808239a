"""crossentropy_onepass: the cross-entropy loss and its gradient together, from one pass over the
logits (a fused op: it replaces `crossentropy`'s forward and backward).

logits (B,T,Vp), targets (B,T) int (-1: no loss there), dlosses (B,T) -> losses (B,T), as
crossentropy (euler_core/ops/crossentropy.py has the math):

    losses[b, t]     = logsumexp_{v < n_valid} logits[b, t, v] - logits[b, t, targets[b, t]]
    dlogits[b, t, v] = dlosses[b, t] * (softmax(logits[b, t, :n_valid])[v] - [v == targets[b, t]])
                       (0 in the padded columns v >= n_valid and at ignored positions)

The gradient is given ahead, as for classifier_crossentropy: in training the gradient of the step's
loss with respect to each position's loss is known before the forward (valid / count / K), so it is
the input `dlosses` (in the losses' dtype), and the forward computes dlogits while it has the row:
unfused, the forward reads the logits once for the logsumexp and the backward reads them again to
write dlogits (at GPT-2's Vp = 50304 and B*T = 65536, 6.6 GB a pass in bf16). The forward keeps
dlogits in `saved`; backward(saved, grad_output, grads) hands it on (copied into grads["logits"]
when that buffer is given) and its grad_output must be None or the very dlosses array. Without
dlosses (evaluation) the forward computes the losses alone and backward is refused.

Example (training): losses, saved = forward({"logits": z, "targets": t, "dlosses": d}, {"n_valid":
50257}); backward(saved, None, {}) -> {"logits": dz}.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import dtype_name, expect_array, expect_shape, nbytes, random_float
from .crossentropy import CrossEntropySpec


@dataclass(frozen=True)
class CrossEntropyOnePassSpec(CrossEntropySpec):
    """crossentropy's inputs, checks and examples, and `dlosses`, the losses' gradient, given ahead."""

    name: str = "crossentropy_onepass"
    inputs: tuple = ("logits", "targets", "dlosses")
    optional: tuple = ("dlosses",)
    grad_input: str = "dlosses"
    replaces: tuple = ("crossentropy",)

    def handed_back(self, forward_dlosses, grad_output, dlogits, grads: dict, copy_into) -> dict:
        """A variant's whole backward: the checks (check_backward), then the dlogits its forward
        computed, as they are or copied by `copy_into(dlogits)` into the buffer the caller gave."""
        self.check_backward(forward_dlosses, grad_output)
        return {"logits": dlogits if grads.get("logits") is None else copy_into(dlogits)}

    def check(self, inputs, attrs):
        super().check(inputs, attrs)
        dlosses = inputs.get("dlosses")
        if dlosses is not None:
            expect_array(self.name, "dlosses", dlosses, 2)
            expect_shape(self.name, "dlosses", dlosses, tuple(inputs["targets"].shape))
            want = self.output_dtype(inputs, attrs)
            if dtype_name(dlosses) != want:
                raise TypeError(f"{self.name}: dlosses must have the losses' dtype {want}, got {dtype_name(dlosses)}")

    def flops(self, inputs, attrs):
        n = inputs["logits"].size
        if inputs.get("dlosses") is None:
            return {"forward": 5 * n, "backward": 0}
        return {"forward": 9 * n, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        logits, targets, dlosses = inputs["logits"], inputs["targets"], inputs.get("dlosses")
        rows = targets.size * 4
        if dlosses is None:
            return {"forward": nbytes(logits, targets) + rows, "backward": 0}
        # the logits read once (a second read of a row hits the cache), dlogits written once
        return {"forward": 2 * nbytes(logits) + nbytes(targets, dlosses) + rows, "backward": 0}

    def example(self, dims, dtype, rng):
        inputs, attrs = super().example(dims, dtype, rng)
        loss_dtype = "float64" if dtype == "float64" else "float32"
        return {**inputs, "dlosses": random_float(rng, inputs["targets"].shape, loss_dtype)}, attrs


SPEC = CrossEntropyOnePassSpec()
