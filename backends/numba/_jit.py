"""What the numba kernels share: the JIT options, a vectorisable float32 exp, output buffers.

fastmath: we allow reassociation (so LLVM vectorises sums and dot products), contraction (FMA),
approximate functions and reciprocals, and ignoring the sign of zero. We do NOT allow 'nnan' or
'ninf': attention and cross-entropy start their running maxima at -inf and must compare with it.

threads_for(work): a kernel call of little work (one decoding step's rows) runs on the calling
thread alone. A parallel loop wakes the other threads and waits for the slowest; on a 2-core
machine shared with other work a woken thread may wait for a core, and a 768-element add then took
0.3 ms on average instead of 6 us (GPT-2 124M's decoding step makes ~75 such calls a token).

fexp(x): exp for float32 without libm, so the loops that call it vectorise (8 lanes with AVX2):
    x = n ln2 + r,  n = round(x / ln2),  |r| <= ln2 / 2       (ln2 split in two for accuracy)
    exp(x) = 2^n * exp(r),  exp(r) by its Taylor series to r^7 (error < 2e-8 relative on |r| <= 0.35)
    2^n is built from its bits: (n + 127) << 23 read as a float32.
Below -87.3 it returns 0, above 88 it saturates at exp(88). Measured: relative error < 1e-7 on
[-87, 88], about 7x the speed of math.exp in a parallel loop. For float64, fexp is math.exp.

Note on the on-disk cache: numba keys a cached function on its own file, not on the files of the
functions it inlines. After editing this file, delete backends/numba/__pycache__ (tests do not
need to: they run on the installed source).
"""

import contextlib
import math
import os

# Worker threads that wait for the next parallel loop sleep instead of spinning. NumPy's BLAS runs
# its own threads between our loops, and this machine class has 2 cores shared with other work:
# spinning OpenMP workers then steal the core a BLAS or numba thread needs (measured on the baby
# GPT under load: 8-10 s a step spinning, 5-7 s passive). libgomp reads this once, when numba
# first starts its thread pool, i.e. after this import; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
from llvmlite import ir  # noqa: E402
import numba  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.extending import intrinsic, overload  # noqa: E402

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# one decorator per kind of kernel; every kernel is cached on disk
jit = njit(cache=True, nogil=True, fastmath=FASTMATH)
pjit = njit(cache=True, nogil=True, fastmath=FASTMATH, parallel=True)


@intrinsic
def _bits_as_float32(typingctx, bits):
    """Reinterpret an int32 as the float32 with the same bits (an LLVM bitcast, free)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


def fexp(x):  # pragma: no cover - replaced inside jitted code by the overload below
    return math.exp(x)


@overload(fexp, inline="always", fastmath=FASTMATH)
def _fexp_overload(x):
    if x == types.float32:
        def exp32(x):
            lo = np.float32(-87.3)
            xc = min(max(x, lo), np.float32(88.0))
            n = math.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
            r = xc - n * np.float32(0.693145751953125)      # ln2, high part (exact in float32)
            r = r - n * np.float32(1.428606765330187e-06)   # ln2, low part
            p = np.float32(1.0 / 5040.0)
            p = p * r + np.float32(1.0 / 720.0)
            p = p * r + np.float32(1.0 / 120.0)
            p = p * r + np.float32(1.0 / 24.0)
            p = p * r + np.float32(1.0 / 6.0)
            p = p * r + np.float32(0.5)
            p = p * r + np.float32(1.0)
            p = p * r + np.float32(1.0)
            y = p * _bits_as_float32((np.int32(n) + np.int32(127)) << np.int32(23))
            return y * np.float32(x >= lo)              # 0 below the float32 range (and at -inf)
        return exp32
    if isinstance(x, types.Float):
        return lambda x: math.exp(x)
    return None


def exp_as(x, like):  # pragma: no cover - replaced inside jitted code by the overload below
    return math.exp(x)


@overload(exp_as, inline="always", fastmath=FASTMATH)
def _exp_as_overload(x, like):
    """exp(x) for a float64 x, computed in the precision of `like` (a float32 or float64 value):
    the float64 difference is rounded once to float32, then fexp. Used where x = a - b is a small
    difference of two large numbers that must not be rounded separately (with fastmath's
    reassociation, (a - hi) - lo in float32 may be regrouped as a - (hi + lo))."""
    if like == types.float32:
        return lambda x, like: fexp(np.float32(x))
    if isinstance(like, types.Float):
        return lambda x, like: math.exp(x)
    return None


def threads() -> int:
    """How many threads numba's parallel loops use (the number of partial sums to keep)."""
    return numba.get_num_threads()


#: elements of work below which a parallel kernel runs on the calling thread only (threads_for)
PARALLEL_MIN_WORK = 1 << 15


@contextlib.contextmanager
def threads_for(work: int):
    """Run the parallel kernels called inside on one thread when `work` (elements) is small."""
    if work >= PARALLEL_MIN_WORK:
        yield
        return
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(n)


# ---- buffers --------------------------------------------------------------------------------------
def dest(buf, shape, dtype):
    """A C-contiguous array to write a result into: `buf` itself when it is usable as it is,
    else a new one (deliver() then copies it into `buf`)."""
    if buf is not None and buf.flags.c_contiguous and buf.dtype == dtype and tuple(buf.shape) == tuple(shape):
        return buf
    return np.empty(shape, dtype)


def deliver(result, buf):
    """Hand back `result`, copied into `buf` (every element) when a buffer was given and not used."""
    if buf is None or result is buf:
        return result
    buf[...] = result
    return buf


def accumulator(buf):
    """A C-contiguous array to accumulate a parameter gradient into: `buf` itself when it is
    contiguous, else zeros (settle() then adds them into `buf`)."""
    return buf if buf.flags.c_contiguous else np.zeros(buf.shape, buf.dtype)


def settle(acc, buf):
    if acc is not buf:
        buf += acc
    return buf


def contiguous(a):
    """`a` as a C-contiguous array (no copy when it already is)."""
    return np.ascontiguousarray(a)


def scalar(value, dtype):
    """`value` as a NumPy scalar of `dtype`, so float32 kernels stay in float32 arithmetic."""
    return np.dtype(dtype).type(value)
