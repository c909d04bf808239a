"""crossentropy_onepass, naive: crossentropy's forward, then (given dlosses) its backward at once,
from the naive kernels (crossentropy.py has the math). The reference reads the logits more than
once; the one pass is what a GPU variant buys (backends/triton/crossentropy_onepass.py).
"""

from dataclasses import dataclass

import numpy as np

from euler_core.ops.crossentropy_onepass import SPEC

from . import crossentropy
from ._out import into


@dataclass
class Saved:
    dlosses: np.ndarray | None  # (B,T) the gradient given ahead; None: evaluation, no backward
    dlogits: np.ndarray | None  # (B,T,Vp)


def forward(inputs, attrs, out=None):
    dlosses = inputs.get("dlosses")
    losses, saved = crossentropy.forward({"logits": inputs["logits"], "targets": inputs["targets"]}, attrs, out)
    if dlosses is None:
        return losses, Saved(None, None)
    return losses, Saved(dlosses, crossentropy.backward(saved, dlosses, {})["logits"])


def backward(saved, grad_output, grads):
    SPEC.check_backward(saved.dlosses, grad_output)
    return {"logits": into(grads.get("logits"), saved.dlogits)}
