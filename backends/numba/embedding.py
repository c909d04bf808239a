"""embedding, numba: a parallel gather forward, a race-free parallel scatter-add backward.

Same math as backends/naive/embedding.py. Forward: rows (b, t) in parallel, each writes
wte[token] + wpe[t] in one loop. Backward: a scatter-add cannot go in parallel over positions (two
positions with one token would add to one row at once), so the threads split the C channels
instead: each thread walks every position but owns its own slice of columns of dwte. dwpe is
summed over the batch with positions t in parallel.
"""

from dataclasses import dataclass

import numpy as np
from numba import prange

from ._jit import accumulator, contiguous, deliver, dest, pjit, settle, threads, threads_for


@dataclass
class Saved:
    tokens: np.ndarray  # (B,T) the ids each position read


@pjit
def _forward(tokens, wte, wpe, out):
    B, T = tokens.shape
    C = wte.shape[1]
    for bt in prange(B * T):
        b, t = bt // T, bt % T
        orow, er, pr = out[b, t], wte[tokens[b, t]], wpe[t]   # 1-D row views
        for c in range(C):
            orow[c] = er[c] + pr[c]


@pjit
def _backward(tokens, dout, dwte, dwpe, chunks):
    B, T, C = dout.shape
    per = (C + chunks - 1) // chunks
    for ch in prange(chunks):                 # each thread owns channels [c0, c1) of dwte
        c0, c1 = ch * per, min(C, (ch + 1) * per)
        for b in range(B):
            for t in range(T):
                er, dr = dwte[tokens[b, t], c0:c1], dout[b, t, c0:c1]
                for c in range(c1 - c0):
                    er[c] += dr[c]
    for t in prange(T):                       # dwpe[t] += sum_b dout[b, t]
        pr = dwpe[t]
        for b in range(B):
            dr = dout[b, t]
            for c in range(C):
                pr[c] += dr[c]


def forward(inputs, attrs, out=None):
    tokens, wte, wpe = (contiguous(inputs[k]) for k in ("tokens", "wte", "wpe"))
    B, T = tokens.shape
    y = dest(out, (B, T, wte.shape[1]), wte.dtype)  # (B,T,C)
    with threads_for(y.size):
        _forward(tokens, wte, wpe, y)
    return deliver(y, out), Saved(tokens)


def backward(saved, dout, grads):
    dwte, dwpe = accumulator(grads["wte"]), accumulator(grads["wpe"])
    C = dout.shape[2]
    chunks = max(1, min(threads(), C // 16 or 1))  # at least 16 channels a thread
    _backward(saved.tokens, contiguous(dout), dwte, dwpe, chunks)
    return {"wte": settle(dwte, grads["wte"]), "wpe": settle(dwpe, grads["wpe"])}
