"""crossentropy, cupy_raw: softmax cross-entropy, one block per row, online logsumexp
(crossentropy.cu has the kernels and the math).

Forward: the row's first n_valid logits read once (16-byte packs), each thread keeping a running max
and sum, merged across the block at the end; the logsumexp (N,) float32 is saved. Backward: one read
and one write of the logits per row, dlogits = dloss * (softmax - onehot), 0 in padded columns and
at ignored positions (target -1). Naive materialises the (B,T,V) softmax; this never does.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

THREADS = 512


@dataclass
class Saved:
    logits: object   # (B,T,V)
    targets: object  # (B*T,) int32
    lse: object      # (B*T,) float32 logsumexp over the first n_valid columns
    n_valid: int


def packs_ok(logits, *others) -> int:
    """1 where the rows can be read as 16-byte packs (V a multiple of a pack, every pointer aligned), else 0:
    the kernels' `vec` (crossentropy_onepass's too)."""
    return int(logits.shape[-1] % (16 // logits.dtype.itemsize) == 0 and _common.vector_ok(logits, *others))


def forward(inputs, attrs, out=None):
    logits, targets = inputs["logits"], inputs["targets"]
    _common.check_float("crossentropy", "logits", logits)
    _common.check_contiguous("crossentropy", logits=logits)
    B, T, V = logits.shape
    n_valid = attrs["n_valid"] or V
    xp = _common.xp_of(logits)
    targets = xp.ascontiguousarray(targets.reshape(-1), dtype=np.int32)  # often a view of a token window
    losses = _common.output("crossentropy", xp, out, (B, T), "float32")
    lse = xp.empty((B * T,), dtype=np.float32)
    k = rt.function("crossentropy", "crossentropy_forward", {"floatX": _common.ctype(logits)})
    rt.launch(k, B * T, THREADS, (logits, targets, losses, lse, _common.i32(V), _common.i32(n_valid),
                                  np.int32(packs_ok(logits))))
    return losses, Saved(logits, targets, lse, n_valid)


def backward(saved, dlosses, grads):
    logits = saved.logits
    B, T, V = logits.shape
    xp = _common.xp_of(logits)
    dlosses = xp.ascontiguousarray(dlosses.reshape(-1), dtype=np.float32)
    dlogits = _common.grad_buffer("crossentropy", grads, "logits", logits, xp)
    k = rt.function("crossentropy", "crossentropy_backward", {"floatX": _common.ctype(logits)})
    rt.launch(k, B * T, THREADS, (logits, saved.targets, saved.lse, dlosses, dlogits, _common.i32(V),
                                  _common.i32(saved.n_valid), np.int32(packs_ok(logits, dlogits))))
    return {"logits": dlogits}
