"""layernorm, numba: one fused pass per row forward, one per row backward, rows in parallel.

Same math as backends/naive/layernorm.py (read that first). What changes:

- forward: each row is read once into cache; its mean and variance (two short loops over the row,
  accumulated in float64) and the output are computed in one kernel; no (N,C) temporaries.
- backward: xhat is recomputed from mean and rstd on the fly (never stored); the two row means,
  dx, and this row's share of dweight and dbias come out of the same loop over the row. Rows are
  split into one chunk per thread; each chunk adds into its own partial (C,) rows of dweight and
  dbias, summed at the end (no two threads ever write one element).
"""

from dataclasses import dataclass

import numpy as np
from numba import prange

from ._jit import accumulator, contiguous, deliver, dest, pjit, settle, threads, threads_for


@dataclass
class Saved:
    x: np.ndarray       # (N,C) the input (a reference, not a copy)
    weight: np.ndarray  # (C,)
    mean: np.ndarray    # (N,) per-row mean, in x's dtype
    rstd: np.ndarray    # (N,) per-row 1/sqrt(var + eps)


@pjit
def _forward(x, w, b, eps, out, mean, rstd):
    N, C = x.shape
    for n in prange(N):
        xr, orow = x[n], out[n]               # 1-D row views: the loops below vectorise
        s = 0.0
        for c in range(C):
            s += xr[c]
        mean[n] = s / C
        mu = mean[n]                          # in x's dtype from here on
        ss = 0.0
        for c in range(C):
            d = xr[c] - mu
            ss += d * d
        rstd[n] = 1.0 / np.sqrt(ss / C + eps)
        rs = rstd[n]
        for c in range(C):
            orow[c] = (xr[c] - mu) * rs * w[c] + b[c]


def forward(inputs, attrs, out=None):
    x, w, b = (contiguous(inputs[k]) for k in ("x", "weight", "bias"))
    N, C = x.shape
    y = dest(out, (N, C), x.dtype)                  # (N,C)
    mean = np.empty(N, x.dtype)                     # (N,)
    rstd = np.empty(N, x.dtype)                     # (N,)
    with threads_for(x.size):
        _forward(x, w, b, float(attrs["eps"]), y, mean, rstd)
    return deliver(y, out), Saved(x, w, mean, rstd)


@pjit
def _backward(dout, x, w, mean, rstd, dx, dw_part, db_part):
    N, C = x.shape
    chunks = dw_part.shape[0]
    per = (N + chunks - 1) // chunks
    for ch in prange(chunks):
        dwp, dbp = dw_part[ch], db_part[ch]
        for n in range(ch * per, min(N, (ch + 1) * per)):
            xr, dr, dxr = x[n], dout[n], dx[n]
            mu = mean[n]
            rs = rstd[n]
            sg = 0.0                          # sum_c g,        g = dout * weight
            sgx = 0.0                         # sum_c g * xhat
            for c in range(C):               # the two sums, in a loop without stores (bitwise repeatable:
                xh = (xr[c] - mu) * rs       # a loop that also stores is vectorised or not depending on
                g = dr[c] * w[c]             # runtime alias checks, i.e. on where the arrays lie)
                sg += g
                sgx += g * xh
            for c in range(C):
                xh = (xr[c] - mu) * rs
                dbp[c] += dr[c]
                dwp[c] += dr[c] * xh
            mg = sg / C
            mgx = sgx / C
            for c in range(C):               # reads dout[n, c] before writing dx[n, c]: may alias
                xh = (xr[c] - mu) * rs
                dxr[c] = rs * (dr[c] * w[c] - mg - xh * mgx)


def backward(saved, dout, grads):
    x = saved.x
    N, C = x.shape
    dout = contiguous(dout)
    dx = dest(grads.get("x"), (N, C), x.dtype)              # (N,C) overwritten
    chunks = max(1, min(threads(), N))
    dw_part = np.zeros((chunks, C), x.dtype)                # (threads,C) partial sums
    db_part = np.zeros((chunks, C), x.dtype)
    _backward(dout, x, saved.weight, saved.mean, saved.rstd, dx, dw_part, db_part)
    dw, db = accumulator(grads["weight"]), accumulator(grads["bias"])
    dw += dw_part.sum(axis=0)
    db += db_part.sum(axis=0)
    return {"x": deliver(dx, grads.get("x")), "weight": settle(dw, grads["weight"]),
            "bias": settle(db, grads["bias"])}

