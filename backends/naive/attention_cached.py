"""attention_cached, naive: Tn new queries over a KV cache, the whole (Tn,L) score matrix in memory.

Per row b (L = lengths[b], or Tk without lengths) and head, with q (Tn,HS), k and v (L,HS) (the
row's first L positions: nothing past them is read), t0 = L - Tn and scale = 1/sqrt(HS):

    S = scale * q @ k.T,  S[i, s] = -inf for s > t0 + i,  P = softmax_rows(S),  y = P @ v

Forward only (see euler_core/ops/attention_cached.py): `backward` exists because every op with an
output has one in the kernel contract, and returns no gradients, since the op has no
differentiable inputs.
"""

import math

import numpy as np

from ._out import into


def _heads(a, n_head):
    """(T,C) -> (NH,T,HS)."""
    T, C = a.shape
    return a.reshape(T, n_head, C // n_head).transpose(1, 0, 2)


def _row(q, k, v, n_head):
    """One row: q (Tn,C), k and v (L,C) -> (Tn,C)."""
    q, k, v = _heads(q, n_head), _heads(k, n_head), _heads(v, n_head)  # (NH,Tn,HS), (NH,L,HS) x2
    NH, Tn, HS = q.shape
    L = k.shape[1]
    scale = 1.0 / math.sqrt(HS)  # a Python float: keeps float32 arrays float32
    S = (q @ k.swapaxes(-1, -2)) * scale                       # (NH,Tn,L)
    future = np.arange(L)[None, :] > (L - Tn + np.arange(Tn))[:, None]  # (Tn,L) True past the query
    S[..., future] = -np.inf
    S = S - S.max(axis=-1, keepdims=True)                      # stable softmax: the row max becomes 0
    P = np.exp(S)
    P /= P.sum(axis=-1, keepdims=True)                         # (NH,Tn,L)
    y = P @ v                                                  # (NH,Tn,HS)
    return y.transpose(1, 0, 2).reshape(Tn, NH * HS)


def forward(inputs, attrs, out=None):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]            # (B,Tn,C), (B,Tk,C) x2
    B, Tn, C = q.shape
    lengths = inputs.get("lengths")
    lengths = [k.shape[1]] * B if lengths is None else [int(n) for n in lengths]
    y = np.stack([_row(q[b], k[b, :n], v[b, :n], attrs["n_head"]) for b, n in enumerate(lengths)])
    return into(out, y.reshape(B, Tn, C)), None


def backward(saved, dout, grads):
    return {}  # no differentiable inputs
