"""matmul, numba: a linear layer, out = x @ weight.T + bias, in two variants.

Same math as backends/naive/matmul.py:  dx = dout @ weight,  dweight += dout.T @ x,  dbias += sum_n dout.

Variants
- `blas` (the default): the products go to the BLAS that NumPy ships (OpenBLAS), called with
  `out=` and transpose flags, so no transposed copy is made. We split each product into one block
  of rows per core ourselves and run the blocks on a small pool of Python threads, each calling a
  single-threaded BLAS (OpenBLAS's per-thread `openblas_set_num_threads_local(1)`; NumPy releases
  the GIL inside BLAS). Why: OpenBLAS's own worker threads spin for a while after every call, and
  on a 2-core machine they then fight numba's threads in the next kernel (attention, layernorm)
  for the cores; our pool's threads sleep on a queue instead. The bias add and the bias gradient
  run in the same row (or column) blocks. dweight is accumulated through a temporary of at most
  4096 rows of weight at a time (BLAS through NumPy cannot accumulate into its output). Where
  NumPy's BLAS offers no per-thread setting, the products are plain np.matmul calls (BLAS's own
  threads). Numba's own np.dot needs SciPy, which the project does not depend on.
- `blocked`: our own tiled kernels, no BLAS. Rows of x are split into blocks run in parallel; inside
  a block, tiles of weight small enough for L1/L2 are reused across every row of the block, and
  the innermost loop is a contiguous dot product (forward) or a contiguous axpy (backward) that
  LLVM vectorises. Four output columns are computed per pass over a row of x, so each load of x
  feeds four FMAs. It shows what BLAS adds on top: packing, register tiles, assembly micro-kernels.
Both take any shapes (N, K, M of 1, primes) in float32 and float64.
"""

from dataclasses import dataclass

import numpy as np
from numba import prange

from ._blas import blocks as _blocks, pool as _pool, run as _run
from ._jit import accumulator, contiguous, deliver, dest, jit, pjit, scalar, settle

NB = 32     # rows of x per parallel block (blocked variant)
MB = 64     # rows of weight per tile
KB = 256    # columns of K per tile
DW_CHUNK = 4096  # rows of dweight per BLAS temporary (blas variant)


@dataclass
class Saved:
    x: np.ndarray       # (N,K) the input (a reference)
    weight: np.ndarray  # (M,K)
    has_bias: bool


@jit
def _colsum_range(dout, db, m0, m1):
    """db[m] += sum_n dout[n, m] for m in [m0, m1), summed in float64 (one thread; releases the GIL)."""
    N = dout.shape[0]
    for c0 in range(m0, m1, 256):
        c1 = min(m1, c0 + 256)
        acc = np.zeros(c1 - c0, np.float64)
        for n in range(N):
            dr = dout[n, c0:c1]
            for m in range(c1 - c0):
                acc[m] += dr[m]
        for m in range(c1 - c0):
            db[c0 + m] += acc[m]


@pjit
def _colsum_into(dout, db):
    """db[m] += sum_n dout[n, m], columns split into blocks run in parallel."""
    N, M = dout.shape
    nblk = (M + 255) // 256
    for blk in prange(nblk):
        m0, m1 = blk * 256, min(M, blk * 256 + 256)
        acc = np.zeros(m1 - m0, np.float64)
        for n in range(N):
            dr = dout[n, m0:m1]
            for m in range(m1 - m0):
                acc[m] += dr[m]
        for m in range(m0, m1):
            db[m] += acc[m - m0]


class Blas:
    """BLAS through NumPy for the products, one row block per core; bias in the same blocks."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        x, w, bias = contiguous(inputs["x"]), contiguous(inputs["weight"]), inputs.get("bias")
        N, K = x.shape
        M = w.shape[0]
        y = dest(out, (N, M), x.dtype)                         # (N,M)
        b = contiguous(bias) if bias is not None else None

        def rows(lo, hi):                                      # y[lo:hi] = x[lo:hi] @ w.T (+ bias)
            np.matmul(x[lo:hi], w.T, out=y[lo:hi])             # gemm with a transpose flag: no copy
            if b is not None:
                y[lo:hi] += b

        _run(rows, _blocks(N, _pool()[1], 2.0 * N * K * M))
        return deliver(y, out), Saved(x, w, bias is not None)

    @staticmethod
    def backward(saved, dout, grads):
        x, w, has_bias = saved.x, saved.weight, saved.has_bias
        N, K = x.shape
        M = w.shape[0]
        dout = contiguous(dout)                                # (N,M)
        dx = dest(grads.get("x"), x.shape, x.dtype)            # (N,K) overwritten
        dw = grads["weight"]                                   # (M,K) accumulated
        db = accumulator(grads["bias"]) if has_bias else None  # (M,) accumulated
        parts = _pool()[1]

        def dx_rows(lo, hi):                                   # dx[lo:hi] = dout[lo:hi] @ w
            np.matmul(dout[lo:hi], w, out=dx[lo:hi])

        def dw_rows(lo, hi):                                   # dw[lo:hi] += dout[:, lo:hi].T @ x
            for m0 in range(lo, hi, DW_CHUNK):
                m1 = min(hi, m0 + DW_CHUNK)
                dw[m0:m1] += dout[:, m0:m1].T @ x              # (m,N) @ (N,K) into a temporary
                if db is not None:
                    _colsum_range(dout, db, m0, m1)

        _run(dx_rows, _blocks(N, parts, 2.0 * N * K * M))
        _run(dw_rows, _blocks(M, parts, 2.0 * N * K * M))
        result = {"x": deliver(dx, grads.get("x")), "weight": dw}
        if has_bias:
            result["bias"] = settle(db, grads["bias"])
        return result


@pjit
def _fwd_blocked(x, w, bias, has_bias, out, zero):
    N, K = x.shape
    M = w.shape[0]
    nblk = (N + NB - 1) // NB
    for blk in prange(nblk):
        n0, n1 = blk * NB, min(N, blk * NB + NB)
        for n in range(n0, n1):
            orow = out[n]
            for m in range(M):
                orow[m] = bias[m] if has_bias else zero
        for m0 in range(0, M, MB):
            m1 = min(M, m0 + MB)
            for k0 in range(0, K, KB):
                k1 = min(K, k0 + KB)
                nk = k1 - k0
                for n in range(n0, n1):
                    xr, orow = x[n, k0:k1], out[n]     # 1-D views: the k loops vectorise
                    m = m0
                    while m + 4 <= m1:                 # four dot products share each load of x
                        w0, w1, w2, w3 = w[m, k0:k1], w[m + 1, k0:k1], w[m + 2, k0:k1], w[m + 3, k0:k1]
                        s0 = s1 = s2 = s3 = zero       # in x's dtype
                        for k in range(nk):
                            xv = xr[k]
                            s0 += xv * w0[k]
                            s1 += xv * w1[k]
                            s2 += xv * w2[k]
                            s3 += xv * w3[k]
                        orow[m] += s0
                        orow[m + 1] += s1
                        orow[m + 2] += s2
                        orow[m + 3] += s3
                        m += 4
                    while m < m1:
                        wr = w[m, k0:k1]
                        s = zero
                        for k in range(nk):
                            s += xr[k] * wr[k]
                        orow[m] += s
                        m += 1


@pjit
def _dx_blocked(dout, w, dx):
    """dx[n, :] = sum_m dout[n, m] w[m, :], row blocks in parallel."""
    N, M = dout.shape
    K = w.shape[1]
    nblk = (N + NB - 1) // NB
    for blk in prange(nblk):
        n0, n1 = blk * NB, min(N, blk * NB + NB)
        for n in range(n0, n1):
            dx[n] = 0.0
        for m0 in range(0, M, MB):
            m1 = min(M, m0 + MB)
            for n in range(n0, n1):
                dxr, dr = dx[n], dout[n]
                m = m0
                while m + 4 <= m1:                     # four rows of w per pass over dx[n]
                    a0, a1, a2, a3 = dr[m], dr[m + 1], dr[m + 2], dr[m + 3]
                    w0, w1, w2, w3 = w[m], w[m + 1], w[m + 2], w[m + 3]
                    for k in range(K):
                        dxr[k] += a0 * w0[k] + a1 * w1[k] + a2 * w2[k] + a3 * w3[k]
                    m += 4
                while m < m1:
                    a, wr = dr[m], w[m]
                    for k in range(K):
                        dxr[k] += a * wr[k]
                    m += 1


@pjit
def _dw_blocked(dout, x, dw):
    """dw[m, :] += sum_n dout[n, m] x[n, :], blocks of weight rows in parallel."""
    N, M = dout.shape
    K = x.shape[1]
    nblk = (M + NB - 1) // NB
    for blk in prange(nblk):
        m0, m1 = blk * NB, min(M, blk * NB + NB)
        for nn in range(0, N, MB):
            nn1 = min(N, nn + MB)
            for m in range(m0, m1):
                dwr = dw[m]
                n = nn
                while n + 4 <= nn1:                    # four rows of x per pass over dw[m]
                    a0, a1, a2, a3 = dout[n, m], dout[n + 1, m], dout[n + 2, m], dout[n + 3, m]
                    x0, x1, x2, x3 = x[n], x[n + 1], x[n + 2], x[n + 3]
                    for k in range(K):
                        dwr[k] += a0 * x0[k] + a1 * x1[k] + a2 * x2[k] + a3 * x3[k]
                    n += 4
                while n < nn1:
                    a, xr = dout[n, m], x[n]
                    for k in range(K):
                        dwr[k] += a * xr[k]
                    n += 1


class Blocked:
    """Our own tiled kernels, no BLAS."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        x, w, bias = contiguous(inputs["x"]), contiguous(inputs["weight"]), inputs.get("bias")
        y = dest(out, (x.shape[0], w.shape[0]), x.dtype)      # (N,M)
        b = contiguous(bias) if bias is not None else np.zeros(1, x.dtype)
        _fwd_blocked(x, w, b, bias is not None, y, scalar(0.0, x.dtype))
        return deliver(y, out), Saved(x, w, bias is not None)

    @staticmethod
    def backward(saved, dout, grads):
        x, w, has_bias = saved.x, saved.weight, saved.has_bias
        dout = contiguous(dout)
        dx = dest(grads.get("x"), x.shape, x.dtype)
        _dx_blocked(dout, w, dx)
        dw = accumulator(grads["weight"])
        _dw_blocked(dout, x, dw)
        result = {"x": deliver(dx, grads.get("x")), "weight": settle(dw, grads["weight"])}
        if has_bias:
            db = accumulator(grads["bias"])
            _colsum_into(dout, db)
            result["bias"] = settle(db, grads["bias"])
        return result
