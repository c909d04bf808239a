"""crossentropy, numba: the classifier's loss fused, one parallel pass per row each way.

Same math as backends/naive/crossentropy.py. What changes:

- forward: per row (position), one loop finds the max of the valid logits, a second sums
  exp(logit - max) (accumulated in float64) and gives lse and the loss; rows in parallel. Only the
  (N,) logsumexp (float64) is kept for the backward, never the (N,V) softmax.
- backward: one loop per row writes dlogits = dloss * (exp(logit - lse) - [v == target]) over the
  valid columns and zeros over the padded ones; ignored rows (target -1) are zeroed.
float32 uses the vectorised _jit.fexp.
"""

from dataclasses import dataclass

import numpy as np
from numba import prange

from ._jit import contiguous, deliver, dest, exp_as, fexp, pjit


@dataclass
class Saved:
    logits: np.ndarray   # (N,Vp) the input (a reference), N = B*T
    targets: np.ndarray  # (N,)
    lse: np.ndarray      # (N,) logsumexp over the valid columns, float64 (see backward)
    n_valid: int
    shape: tuple         # (B,T,Vp)


@pjit
def _forward(logits, targets, V, lse, losses):
    N = logits.shape[0]
    for n in prange(N):
        row = logits[n]                       # 1-D row view: the loops below vectorise
        mx = row[0]
        for v in range(1, V):
            mx = max(mx, row[v])
        s = 0.0
        for v in range(V):
            s += fexp(row[v] - mx)
        lse[n] = mx + np.log(s)
        tgt = targets[n]
        losses[n] = lse[n] - row[tgt] if tgt >= 0 else 0.0


@pjit
def _backward(logits, targets, lse, dlosses, V, dlogits):
    N, Vp = logits.shape
    for n in prange(N):
        tgt = targets[n]
        row, drow = logits[n], dlogits[n]
        if tgt < 0:
            for v in range(Vp):
                drow[v] = 0.0
            continue
        d = dlosses[n]
        m = lse[n]                            # float64
        for v in range(V):
            drow[v] = d * exp_as(row[v] - m, d)   # the difference in float64, then exp in row's dtype
        drow[tgt] -= d
        for v in range(V, Vp):
            drow[v] = 0.0


def forward(inputs, attrs, out=None):
    logits, targets = contiguous(inputs["logits"]), contiguous(inputs["targets"])
    B, T, Vp = logits.shape
    V = attrs["n_valid"] or Vp
    ldt = np.float64 if logits.dtype == np.float64 else np.float32
    losses = dest(out, (B, T), ldt)                      # (B,T)
    lse = np.empty(B * T, np.float64)                    # (N,)
    _forward(logits.reshape(B * T, Vp), targets.reshape(-1), V, lse, losses.reshape(-1))
    return deliver(losses, out), Saved(logits.reshape(B * T, Vp), targets.reshape(-1), lse, V,
                                             (B, T, Vp))


def backward(saved, dlosses, grads):
    N, Vp = saved.logits.shape
    buf = grads.get("logits")                                # (B,T,Vp) or None
    dlosses = np.ascontiguousarray(dlosses, dtype=saved.logits.dtype).reshape(-1)  # (N,)
    dl = dest(buf, saved.shape, saved.logits.dtype)          # (B,T,Vp) overwritten
    # lse stays float64: with |logits| ~ 100, lse rounded to float32 is off by up to 8e-6, which
    # moves every probability by that much relative (conformance's large-logits case caught it)
    _backward(saved.logits, saved.targets, saved.lse, dlosses, saved.n_valid, dl.reshape(N, Vp))
    return {"logits": deliver(dl, buf)}
