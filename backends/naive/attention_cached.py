"""attention_cached, naive: Tn new queries over Tk cached keys, the whole (Tn,Tk) matrix in memory.

Per batch and head, with q (Tn,HS), k and v (Tk,HS), t0 = Tk - Tn and scale = 1/sqrt(HS):

    S = scale * q @ k.T,  S[i, s] = -inf for s > t0 + i,  P = softmax_rows(S),  y = P @ v

Forward only (see euler_core/ops/attention_cached.py): `backward` exists because every op with an
output has one in the kernel contract, and returns no gradients, since the op has no
differentiable inputs.
"""

import math

import numpy as np

from ._out import into


def _heads(a, n_head):
    """(B,T,C) -> (B,NH,T,HS)."""
    B, T, C = a.shape
    return a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)


def forward(inputs, attrs, out=None):
    n_head = attrs["n_head"]
    q, k, v = (_heads(inputs[name], n_head) for name in ("q", "k", "v"))  # (B,NH,Tn,HS), (B,NH,Tk,HS) x2
    B, NH, Tn, HS = q.shape
    Tk = k.shape[2]
    scale = 1.0 / math.sqrt(HS)  # a Python float: keeps float32 arrays float32
    S = (q @ k.swapaxes(-1, -2)) * scale                       # (B,NH,Tn,Tk)
    future = np.arange(Tk)[None, :] > (Tk - Tn + np.arange(Tn))[:, None]  # (Tn,Tk) True past the query
    S[..., future] = -np.inf
    S = S - S.max(axis=-1, keepdims=True)                      # stable softmax: the row max becomes 0
    P = np.exp(S)
    P /= P.sum(axis=-1, keepdims=True)                         # (B,NH,Tn,Tk)
    y = P @ v                                                  # (B,NH,Tn,HS)
    return into(out, y.transpose(0, 2, 1, 3).reshape(B, Tn, NH * HS)), None


def backward(saved, dout, grads):
    return {}  # no differentiable inputs
