"""attention_cached, numba: Tn new queries over a KV cache (generation).

Same math as backends/naive/attention_cached.py: in row b (L = lengths[b], or Tk) query i sits at
position t0 + i (t0 = L - Tn) and sees keys 0..t0+i; nothing past L is read. Built from the `rows`
attention kernel's pieces (attention.py): per (batch, head) in parallel, one query at a time, its
scores in a row buffer, an exact softmax, then P @ v; no (Tn,L) matrix. Forward only: there is
nothing to differentiate. A call of little work (a short cache) runs on one thread (_jit.threads_for).
"""

import numpy as np
from numba import prange

from ._jit import contiguous, deliver, dest, fexp, pjit, scalar, threads_for
from .attention import _add_pv, _scores


@pjit
def _forward(q2, k2, v2, lengths, B, Tn, Tk, NH, scale, zero, o2):
    C = q2.shape[1]
    HS = C // NH
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        ho = h * HS
        t0 = lengths[b] - Tn
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
    lengths = inputs.get("lengths")
    lengths = np.full(B, Tk, np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
    y = dest(out, (B, Tn, C), q.dtype)
    with threads_for(int(lengths.sum()) * Tn * C):
        _forward(q.reshape(B * Tn, C), k.reshape(B * Tk, C), v.reshape(B * Tk, C), lengths, B, Tn, Tk, NH,
                 scalar(1.0 / np.sqrt(C // NH), q.dtype), scalar(0.0, q.dtype), y.reshape(B * Tn, C))
    return deliver(y, out), None


def backward(saved, dout, grads):
    return {}  # no differentiable inputs
