"""sumsq, numba: sum(x^2) in fixed blocks, in parallel, then the block sums in order.

The naive backend's np.dot leaves the summation order to BLAS; here every block of BLOCK elements
is summed by one thread and the block sums are added in block order, so the result is the same
bits however many threads run.
"""

import numpy as np
from numba import prange

from ._jit import jit, pjit

BLOCK = 1 << 16


@pjit
def _block_sums(x, sums, block, zero):
    for b in prange(sums.size):
        acc = zero
        for i in range(b * block, min(x.size, (b + 1) * block)):
            acc += x[i] * x[i]
        sums[b] = acc


@jit
def _total(sums, zero):
    acc = zero
    for s in sums:
        acc += s
    return acc


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    dt = np.float64 if x.dtype == np.float64 else np.float32
    flat = np.ascontiguousarray(x.reshape(-1), dtype=dt)
    sums = np.empty(max(1, -(-flat.size // BLOCK)), dtype=dt)
    _block_sums(flat, sums, BLOCK, dt(0.0))
    y = out if out is not None else np.empty(1, dtype=dt)
    y[0] = _total(sums, dt(0.0))
    return y, None


def backward(saved, dout, grads):
    return {}  # nothing to differentiate
