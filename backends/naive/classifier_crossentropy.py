"""classifier_crossentropy, naive: the classifier and the loss composed from their naive kernels,
on all the rows at once (the reference does hold the whole (N,Vp) logits: it is for small shapes).

    logits = x @ weight.T               (matmul.py)
    losses = crossentropy(logits)       (crossentropy.py; one row of positions: (1,N,Vp))

Given dlosses (the output's gradient, ahead), the forward also runs both backwards: dlogits from
crossentropy's, then dx = dlogits @ weight and dweight = dlogits.T @ x from matmul's, into a buffer
of its own; backward adds that buffer to grads["weight"] and hands dx on.
"""

from dataclasses import dataclass

import numpy as np

from euler_core.ops.classifier_crossentropy import SPEC

from . import crossentropy, matmul
from ._out import into


@dataclass
class Saved:
    dlosses: np.ndarray | None  # (N,) the gradient given ahead; None: evaluation, no backward
    dx: np.ndarray | None       # (N,C)
    dweight: np.ndarray | None  # (Vp,C)


def forward(inputs, attrs, out=None):
    x, weight, targets, dlosses = inputs["x"], inputs["weight"], inputs["targets"], inputs.get("dlosses")
    logits, s_matmul = matmul.forward({"x": x, "weight": weight}, {})                      # (N,Vp)
    losses, s_ce = crossentropy.forward({"logits": logits[None], "targets": targets[None]}, attrs)  # (1,N)
    losses = into(out, losses[0])                                                           # (N,)
    if dlosses is None:
        return losses, Saved(None, None, None)
    dlogits = crossentropy.backward(s_ce, dlosses[None], {})["logits"][0]                  # (N,Vp)
    dweight = np.zeros_like(weight)                                                         # (Vp,C)
    dx = matmul.backward(s_matmul, dlogits, {"weight": dweight})["x"]                      # (N,C)
    return losses, Saved(dlosses, dx, dweight)


def backward(saved, grad_output, grads):
    SPEC.check_backward(saved.dlosses, grad_output)
    grads["weight"] += saved.dweight
    return {"x": into(grads.get("x"), saved.dx), "weight": grads["weight"]}
