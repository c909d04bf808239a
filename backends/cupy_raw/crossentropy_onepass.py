"""crossentropy_onepass, cupy_raw: the loss and dlogits of each row from one read of its logits,
one block per row, the row's exps held in shared memory between the two walks (crossentropy_onepass.cu
has the kernel and the math).

crossentropy's forward and backward (crossentropy.cu) read the (N, Vp) logits twice and write dlogits
once: 3 x 6.6 GB at GPT-2 124M's B=64. Here the first walk copies the row into shared memory by
cp.async and turns it there into each logit's exp (relative to its group's max) as it computes the
logsumexp, and the second scales those into dlogits: the logits are read once, and each takes one exp
where the pair took two. The row's exps must fit in a block's shared memory (227 KB on sm_90: 50304
logits in bf16 or float32); a longer row is read from memory again (`staged` = 0), its exps taken
twice. Without dlosses (evaluation) this is
crossentropy's forward alone.
"""

from dataclasses import dataclass

import numpy as np

from euler_core.ops.crossentropy_onepass import SPEC

from . import _common, crossentropy
from . import _runtime as rt
from .residual import copy_into

OP = "crossentropy_onepass"
THREADS = 512  # the kernel's __launch_bounds__: two blocks an SM (crossentropy_onepass.cu)
UNROLL = 4     # packs a group of the kernel's walks (its UNROLL define; reports/cupy_raw-h200/onepass-a06107a)


@dataclass
class Saved:
    dlosses: object  # (B,T) the gradient given ahead (None: an evaluation forward)
    dlogits: object  # (B,T,Vp)


def staged_bytes(V: int, itemsize: int, vec: bool = True) -> int:
    """The shared memory a staged row of V logits takes (their exps: half for 16-bit logits, float
    for float32; then each (group, thread)'s max, with `vec` the packs' groups), or 0 where it does
    not fit beside the kernel's own."""
    exps = -(-V * itemsize // 16) * 16       # floatE is as wide as the logits
    packs = V // (16 // itemsize) if vec else 0
    groups = -(-packs // (UNROLL * THREADS))
    total = exps + 4 * groups * THREADS
    return total if total + 1024 <= rt.MAX_SHARED_PER_BLOCK else 0


def forward(inputs, attrs, out=None):
    logits, targets, dlosses = inputs["logits"], inputs["targets"], inputs.get("dlosses")
    _common.check_float(OP, "logits", logits)
    _common.check_contiguous(OP, logits=logits)
    if dlosses is None:
        losses, _ = crossentropy.forward({"logits": logits, "targets": targets}, attrs, out)
        return losses, Saved(None, None)
    B, T, V = logits.shape
    n_valid = attrs["n_valid"] or V
    xp = _common.xp_of(logits)
    targets = xp.ascontiguousarray(targets.reshape(-1), dtype=np.int32)  # often a view of a token window
    row_dlosses = xp.ascontiguousarray(dlosses.reshape(-1), dtype=np.float32)
    losses = _common.output(OP, xp, out, (B, T), "float32")
    dlogits = xp.empty_like(logits)
    vec = crossentropy.packs_ok(logits, dlogits)
    shared = staged_bytes(V, logits.dtype.itemsize, vec)
    k = rt.function(OP, "crossentropy_onepass", {"floatX": _common.ctype(logits), "UNROLL": UNROLL})
    rt.launch(k, B * T, THREADS, (logits, targets, row_dlosses, losses, dlogits, _common.i32(V),
                                  _common.i32(n_valid), np.int32(vec), np.int32(shared > 0)), shared_mem=shared)
    return losses, Saved(dlosses, dlogits)


def backward(saved, grad_output, grads):
    def into_buffer(d):  # the dlogits into grads["logits"], checked as an activation-gradient buffer
        return copy_into(d, _common.grad_buffer(OP, grads, "logits", d, _common.xp_of(d)))
    return SPEC.handed_back(saved.dlosses, grad_output, saved.dlogits, grads, into_buffer)
