"""attention, naive: causal multi-head attention with the whole T x T matrix in memory.

Per batch and head, with q, k, v (T,HS) and scale = 1/sqrt(HS):

    S = scale * q @ k.T,  S[t, s] = -inf for s > t,  P = softmax_rows(S),  y = P @ v

Backward, given dy (T,HS):
    dv = P.T @ dy                      (y is linear in v)
    dP = dy @ v.T                      (y is linear in P)
    dS = P * (dP - rowsum(P * dP))     softmax: dS_ts = P_ts (dP_ts - sum_s' P_ts' dP_ts')
    dq = scale * dS @ k,  dk = scale * dS.T @ q
Masked entries have P = 0, so dS = 0 there: the mask needs no special case in the backward.

Memory is O(B * NH * T^2): this is the version to read, not the one to train long contexts with.

Written against NumPy's API, which CuPy arrays dispatch to CuPy, so the same lines run on the GPU
(the benchmark's float64 reference at GPT-2's shapes, euler_core/measure/ops.py); the one array made
here, the mask, is made by the inputs' own module.
"""

import math
from dataclasses import dataclass

import numpy as np

from euler_core.device import module_of

from ._out import into


@dataclass
class Saved:
    q: np.ndarray  # (B,NH,T,HS)
    k: np.ndarray  # (B,NH,T,HS)
    v: np.ndarray  # (B,NH,T,HS)
    P: np.ndarray  # (B,NH,T,T) attention weights


def split_heads(qkv, n_head):
    """(B,T,3C) -> q, k, v, each (B,NH,T,HS)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    return [a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3) for a in (q, k, v)]


def merge_heads(y):
    """(B,NH,T,HS) -> (B,T,C)."""
    B, NH, T, HS = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, NH * HS)


def forward(inputs, attrs, out=None):
    q, k, v = split_heads(inputs["qkv"], attrs["n_head"])  # (B,NH,T,HS) each
    xp = module_of(q)  # numpy, or cupy for the benchmark's float64 reference on the GPU
    T, HS = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(HS)  # a Python float: keeps float32 arrays float32
    S = (q @ k.swapaxes(-1, -2)) * scale               # (B,NH,T,T)
    future = xp.triu(xp.ones((T, T), dtype=bool), k=1)  # (T,T) True above the diagonal
    S = np.where(future, -np.inf, S)
    S = S - S.max(axis=-1, keepdims=True)               # stable softmax: the row max becomes 0
    P = np.exp(S)
    P /= P.sum(axis=-1, keepdims=True)                  # (B,NH,T,T)
    y = P @ v                                           # (B,NH,T,HS)
    return into(out, merge_heads(y)), Saved(q, k, v, P)


def backward(saved, dout, grads):
    q, k, v, P = saved.q, saved.k, saved.v, saved.P
    B, NH, T, HS = q.shape
    scale = 1.0 / math.sqrt(HS)  # a Python float: keeps float32 arrays float32
    dy = dout.reshape(B, T, NH, HS).transpose(0, 2, 1, 3)  # (B,NH,T,HS)
    dv = P.swapaxes(-1, -2) @ dy                           # (B,NH,T,HS)
    dP = dy @ v.swapaxes(-1, -2)                           # (B,NH,T,T)
    dS = P * (dP - (P * dP).sum(axis=-1, keepdims=True))   # (B,NH,T,T)
    dq = (dS @ k) * scale                                  # (B,NH,T,HS)
    dk = (dS.swapaxes(-1, -2) @ q) * scale                 # (B,NH,T,HS)
    dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)  # (B,T,3C)
    return {"qkv": into(grads.get("qkv"), dqkv)}
