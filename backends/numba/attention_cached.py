"""attention_cached, numba: Tn new queries over Tk cached keys (generation with a KV cache).

Same math as backends/naive/attention_cached.py: query i sits at position t0 + i (t0 = Tk - Tn)
and sees keys 0..t0+i. Built from the `rows` attention kernel's pieces (attention.py): per
(batch, head) in parallel, one query at a time, its scores in a row buffer of Tk numbers, an exact
softmax, then P @ v; no (Tn,Tk) matrix. Forward only: there is nothing to differentiate.
"""

import numpy as np
from numba import prange

from ._jit import contiguous, deliver, dest, fexp, pjit, scalar
from .attention import _add_pv, _scores


@pjit
def _forward(q2, k2, v2, B, Tn, Tk, NH, scale, zero, o2):
    C = q2.shape[1]
    HS = C // NH
    t0 = Tk - Tn
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        ho = h * HS
        row = np.empty(Tk, q2.dtype)               # (Tk,) one query's scores, then probabilities
        acc = np.empty(HS, q2.dtype)
        for i in range(Tn):
            nk = t0 + i + 1                        # keys this query may see
            _scores(q2, b * Tn + i, ho, k2, b * Tk, ho, nk, HS, scale, zero, row)
            mx = row[0]
            for j in range(1, nk):
                mx = max(mx, row[j])
            l = zero
            for j in range(nk):
                p = fexp(row[j] - mx)
                row[j] = p
                l += p
            for d in range(HS):
                acc[d] = zero
            _add_pv(v2, b * Tk, ho, nk, HS, row, acc)
            inv = 1.0 / l
            orow = o2[b * Tn + i, ho:ho + HS]
            for d in range(HS):
                orow[d] = acc[d] * inv


def forward(inputs, attrs, out=None):
    q, k, v = (contiguous(inputs[n]) for n in ("q", "k", "v"))   # (B,Tn,C), (B,Tk,C) x2
    NH = attrs["n_head"]
    B, Tn, C = q.shape
    Tk = k.shape[1]
    y = dest(out, (B, Tn, C), q.dtype)
    _forward(q.reshape(B * Tn, C), k.reshape(B * Tk, C), v.reshape(B * Tk, C), B, Tn, Tk, NH,
             scalar(1.0 / np.sqrt(C // NH), q.dtype), scalar(0.0, q.dtype), y.reshape(B * Tn, C))
    return deliver(y, out), None


def backward(saved, dout, grads):
    return {}  # no differentiable inputs
