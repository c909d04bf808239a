"""NumPy's BLAS from several threads at once, each call single-threaded.

The `blas` variants (matmul, attention) cut their products into one block per core and run the
blocks on this small pool of Python threads. Each pool thread sets OpenBLAS's per-thread thread
count to 1 (`openblas_set_num_threads_local`, OpenBLAS >= 0.3.27, found in the library NumPy
loaded), and NumPy releases the GIL inside BLAS, so the blocks run in parallel. Why not let
OpenBLAS use its own threads: they spin for a while after every call, and on a 2-core machine
they then compete with numba's threads in the next kernel; our pool's threads sleep on a queue.
(Measured on the shared 2-core machine: a whole baby-GPT step neither faster nor slower than with
BLAS's own threads; kept because it never runs more busy threads than cores.)
Where NumPy's BLAS has no per-thread setting, `pool()` reports no executor and the callers make
plain NumPy calls (BLAS with its own threads). Process-wide BLAS settings are never changed.
"""

import numpy as np

from ._jit import threads

_POOL = {}
MIN_PARALLEL_FLOPS = 4e6  # below this a product runs in the calling thread


def _blas_single_threaded_setter():
    """OpenBLAS's openblas_set_num_threads_local from the library NumPy loaded, or None."""
    import ctypes
    import glob
    import os
    here = os.path.dirname(np.__file__)
    for pattern in ("../numpy.libs/*openblas*.so*", ".libs/*openblas*.so*", "../numpy.libs/*openblas*.dylib"):
        for path in glob.glob(os.path.join(here, pattern)):
            try:
                fn = ctypes.CDLL(path).openblas_set_num_threads_local
            except (OSError, AttributeError):
                continue
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


def pool():
    """(executor, parts): a pool of one thread per core whose BLAS calls are single-threaded, or
    (None, 1) where that cannot be arranged (then BLAS uses its own threads)."""
    import os
    if _POOL.get("pid") != os.getpid():      # none yet, or a forked child: its copy has no threads
        _POOL.clear()
        _POOL["pid"] = os.getpid()
    if "pool" not in _POOL:
        from concurrent.futures import ThreadPoolExecutor
        setter = _blas_single_threaded_setter()
        parts = threads()
        if setter is None or parts < 2:
            _POOL["pool"] = (None, 1)
        else:
            _POOL["pool"] = (ThreadPoolExecutor(parts, thread_name_prefix="euler-blas",
                                                initializer=lambda: setter(1)), parts)
    return _POOL["pool"]


def blocks(n, parts, flops):
    """[(lo, hi), ...]: n rows cut into `parts` blocks (one when the product is small)."""
    parts = parts if flops >= MIN_PARALLEL_FLOPS else 1
    parts = max(1, min(parts, n))
    step = (n + parts - 1) // parts
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def run(fn, blocks):
    executor, _ = pool()
    if executor is None or len(blocks) == 1:
        for lo, hi in blocks:
            fn(lo, hi)
        return
    for f in [executor.submit(fn, lo, hi) for lo, hi in blocks]:
        f.result()
