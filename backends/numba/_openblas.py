"""Find the OpenBLAS that NumPy ships, and the three functions of it the `blas` variants call.

Light on purpose (ctypes and NumPy only, no numba): the registry calls `unavailable_reason()` when
it chooses variants, and choosing must not import numba.

NumPy's wheels (1.26 and 2.x) bundle an OpenBLAS built with 64-bit integers, whose C interface
carries a suffix: `cblas_sgemm64_` (NumPy 1.26) or `scipy_cblas_sgemm64_` (NumPy 2.x). We also need
`openblas_set_num_threads_local` (OpenBLAS >= 0.3.27): it makes the calling thread's BLAS calls
single-threaded, so that each of numba's threads runs its own product on its own core (see
_blas.py). A NumPy linked against another BLAS (MKL, Accelerate, a system OpenBLAS without these
names) makes the `blas` variants unavailable, with the reason below; the other variants still run.
"""

import ctypes
import glob
import os

import numpy as np

# (our name, the names it goes by in NumPy's OpenBLAS builds); every integer argument is 64-bit
SYMBOLS = {
    "euler_cblas_sgemm": ("scipy_cblas_sgemm64_", "cblas_sgemm64_"),
    "euler_cblas_dgemm": ("scipy_cblas_dgemm64_", "cblas_dgemm64_"),
    "euler_blas_threads_local": ("openblas_set_num_threads_local",),
}
_FOUND: dict = {}


def _library_paths():
    here = os.path.dirname(np.__file__)
    for pattern in ("../numpy.libs/*openblas*.so*", ".libs/*openblas*.so*", ".dylibs/*openblas*.dylib"):
        yield from sorted(glob.glob(os.path.join(here, pattern)))


def addresses() -> dict[str, int]:
    """{our name: function address} from NumPy's OpenBLAS; raises RuntimeError saying what is missing."""
    if "addresses" in _FOUND:
        return _FOUND["addresses"]
    if "error" in _FOUND:
        raise RuntimeError(_FOUND["error"])
    tried = []
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{os.path.basename(path)} ({e})")
            continue
        found = {}
        for ours, names in SYMBOLS.items():
            for name in names:
                if hasattr(lib, name):
                    found[ours] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                    break
        if len(found) == len(SYMBOLS):
            _FOUND["addresses"] = found
            return found
        missing = [SYMBOLS[k][0] for k in SYMBOLS if k not in found]
        tried.append(f"{os.path.basename(path)} (no {', '.join(missing)})")
    _FOUND["error"] = ("needs the OpenBLAS bundled with NumPy's wheels (64-bit-integer CBLAS and "
                       "openblas_set_num_threads_local, OpenBLAS >= 0.3.27); "
                       + (f"tried: {'; '.join(tried)}" if tried else "this NumPy bundles no OpenBLAS"))
    raise RuntimeError(_FOUND["error"])


def unavailable_reason() -> str | None:
    """None when the `blas` variants can run here, else why not (for the registry)."""
    try:
        addresses()
    except RuntimeError as e:
        return str(e)
    return None
