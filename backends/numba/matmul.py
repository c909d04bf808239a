"""matmul, numba: a linear layer, out = x @ weight.T + bias, in two variants.

Same math as backends/naive/matmul.py:  dx = dout @ weight,  dweight += dout.T @ x,  dbias += sum_n dout.

Variants
- `blas` (the default): the products go to the OpenBLAS that NumPy ships, called from inside one
  numba kernel per direction (_blas.py): `prange` cuts the rows (forward, dx) or the weight rows
  (dweight) into one block per core, and each block is one single-threaded GEMM with transpose
  flags (no transposed copy). The bias is written into y first and the GEMM adds to it (beta = 1);
  dweight is accumulated by the GEMM itself (beta = 1, no temporary); dbias is summed in the same
  weight-row blocks, in float64. Why our own blocks instead of OpenBLAS's threads: those spin for a
  while after every call and, on a 2-core machine, fight numba's threads in the next kernel for the
  cores. Unavailable (with the reason) where NumPy bundles no suitable OpenBLAS (_openblas.py).
  A forward of at most SMALL_N rows (a decoding step: one row per sequence) is not a GEMM but a
  matrix-vector product bound by reading the weight once: a GEMM would copy ("pack") the whole
  weight first, and one row cannot be split over the cores. It runs as `_forward_rows` instead:
  weight rows in parallel, each read once from memory and dotted with the (at most 4, in L1) rows
  of x. GPT-2 124M's classifier (50304 x 768) at 1 row: 5 ms, about 28 GB/s on 2 cores, where
  the GEMM took 23 ms.
- `blocked`: our own tiled kernels, no BLAS. Rows of x are split into blocks run in parallel; inside
  a block, tiles of weight small enough for L1/L2 are reused across every row of the block, and
  the innermost loop is a contiguous dot product (forward) or a contiguous axpy (backward) that
  LLVM vectorises. Four output columns are computed per pass over a row of x, so each load of x
  feeds four FMAs. It shows what BLAS adds on top: packing, register tiles, assembly micro-kernels.
Both take any shapes (N, K, M of 1, primes) in float32 and float64.
"""

from dataclasses import dataclass

import numpy as np
from numba import get_num_threads, prange

from ._blas import NO_TRANS, TRANS, blocks, gemm, single_threaded_blas
from ._jit import accumulator, contiguous, deliver, dest, jit, pjit, scalar, settle, threads_for

NB = 32     # rows of x per parallel block (blocked variant)
MB = 64     # rows of weight per tile
KB = 256    # columns of K per tile
MIN_PARALLEL_FLOPS = 4e6  # below this a blas product runs as one block (splitting costs more)
SMALL_N = 4  # forwards of at most this many rows run as _forward_rows (measured: faster up to 4)


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
    M = dout.shape[1]
    for blk in prange((M + 255) // 256):
        _colsum_range(dout, db, blk * 256, min(M, blk * 256 + 256))


@pjit
def _forward_blas(x, w, bias, has_bias, y, threads):
    """y = x @ w.T (+ bias): row blocks in parallel, one single-threaded GEMM each."""
    N, K = x.shape
    M = w.shape[0]
    if 2.0 * N * K * M < MIN_PARALLEL_FLOPS:
        threads = 1
    parts, step = blocks(N, threads)
    for p in prange(parts):
        single_threaded_blas()
        lo, hi = p * step, min(N, p * step + step)
        if hi > lo:
            if has_bias:
                for n in range(lo, hi):
                    y[n] = bias
            gemm(NO_TRANS, TRANS, hi - lo, M, K, 1.0, x, lo * K, K, w, 0, K,
                 1.0 if has_bias else 0.0, y, lo * M, M)


@pjit
def _forward_rows(x, w, bias, has_bias, y, zero):
    """y = x @ w.T (+ bias) for a few rows of x: weight rows in parallel, each read once and dotted
    with every row of x, four rows of x per pass (each load of w feeds four FMAs)."""
    N, K = x.shape
    M = w.shape[0]
    for m in prange(M):
        wr = w[m]
        b = bias[m] if has_bias else zero
        n = 0
        while n + 4 <= N:
            x0, x1, x2, x3 = x[n], x[n + 1], x[n + 2], x[n + 3]
            s0 = s1 = s2 = s3 = zero
            for k in range(K):
                wv = wr[k]
                s0 += x0[k] * wv
                s1 += x1[k] * wv
                s2 += x2[k] * wv
                s3 += x3[k] * wv
            y[n, m] = s0 + b
            y[n + 1, m] = s1 + b
            y[n + 2, m] = s2 + b
            y[n + 3, m] = s3 + b
            n += 4
        while n < N:
            xr = x[n]
            s = zero
            for k in range(K):
                s += xr[k] * wr[k]
            y[n, m] = s + b
            n += 1


@pjit
def _backward_blas(x, w, dout, dx, dw, db, has_bias, threads):
    """dx = dout @ w (row blocks); dw += dout.T @ x and db += colsum(dout) (weight-row blocks)."""
    N, K = x.shape
    M = w.shape[0]
    if 2.0 * N * K * M < MIN_PARALLEL_FLOPS:
        threads = 1
    parts, step = blocks(N, threads)
    for p in prange(parts):
        single_threaded_blas()
        lo, hi = p * step, min(N, p * step + step)
        if hi > lo:
            gemm(NO_TRANS, NO_TRANS, hi - lo, K, M, 1.0, dout, lo * M, M, w, 0, K, 0.0, dx, lo * K, K)
    parts, step = blocks(M, threads)
    for p in prange(parts):
        single_threaded_blas()
        lo, hi = p * step, min(M, p * step + step)
        if hi > lo:   # dout[:, lo:hi] is an (N, hi-lo) matrix at offset lo with leading dimension M
            gemm(TRANS, NO_TRANS, hi - lo, K, N, 1.0, dout, lo, M, x, 0, K, 1.0, dw, lo * K, K)
            if has_bias:
                _colsum_range(dout, db, lo, hi)


class Blas:
    """OpenBLAS GEMMs on one block per core, called from numba; bias and dbias in the same blocks."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        x, w, bias = contiguous(inputs["x"]), contiguous(inputs["weight"]), inputs.get("bias")
        y = dest(out, (x.shape[0], w.shape[0]), x.dtype)      # (N,M)
        b = contiguous(bias) if bias is not None else np.zeros(w.shape[0], x.dtype)
        if x.shape[0] <= SMALL_N:
            with threads_for(w.size * x.shape[0]):
                _forward_rows(x, w, b, bias is not None, y, scalar(0.0, x.dtype))
        else:
            _forward_blas(x, w, b, bias is not None, y, get_num_threads())
        return deliver(y, out), Saved(x, w, bias is not None)

    @staticmethod
    def backward(saved, dout, grads):
        x, w, has_bias = saved.x, saved.weight, saved.has_bias
        dout = contiguous(dout)                                # (N,M)
        dx = dest(grads.get("x"), x.shape, x.dtype)            # (N,K) overwritten
        dw = accumulator(grads["weight"])                      # (M,K) accumulated
        db = accumulator(grads["bias"]) if has_bias else np.zeros(1, x.dtype)
        _backward_blas(x, w, dout, dx, dw, db, has_bias, get_num_threads())
        result = {"x": deliver(dx, grads.get("x")), "weight": settle(dw, grads["weight"])}
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
