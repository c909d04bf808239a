"""Array helpers of the suite: dtypes it can make here, snapshots, poisoned and finite outputs.

The comparison against the float64 reference, the dtype helpers and CheckFailed are the core's
(euler_core/numerics.py: the benchmark's check uses them too); they are imported here under the
names the suite's modules and the backends' test helpers use.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from euler_core.numerics import (HALF_DTYPES, CheckFailed, index_text, compare, host, host64, is_float,  # noqa: F401
                                 np_dtype, param_grad_dtype)


class CheckSkipped(Exception):
    """A check cannot run here (the reason is the message); reported as SKIP, never as PASS."""


def dtype_unavailable_reason(dtype: str, device: str) -> str | None:
    """None when arrays of `dtype` can be made on `device` here, else why not."""
    if dtype == "bfloat16":
        if importlib.util.find_spec("ml_dtypes") is None:
            return "bfloat16 needs ml_dtypes (pip install ml_dtypes)"
        if device == "cuda":
            return _cupy_bfloat16_reason()
    if dtype not in ("float64", "float32", "float16", "bfloat16"):
        return f"{dtype} is not a storage dtype"
    return None


def _cupy_bfloat16_reason() -> str | None:
    """CuPy 14 makes bfloat16 arrays through ml_dtypes (elementwise ops, astype, host copies); older
    CuPy cannot. Probed once, only where a CUDA variant is about to be checked."""
    if "bf16" not in _CUPY_BF16:
        try:
            import cupy
            import ml_dtypes
            a = cupy.asarray(np.arange(3, dtype=np.float32).astype(ml_dtypes.bfloat16))
            ok = a.get().astype(np.float32).tolist() == [0.0, 1.0, 2.0]
            _CUPY_BF16["bf16"] = None if ok else "CuPy's bfloat16 arrays gave wrong values"
        except Exception as e:
            _CUPY_BF16["bf16"] = f"CuPy cannot make bfloat16 arrays here ({type(e).__name__}: {e})"
    return _CUPY_BF16["bf16"]


_CUPY_BF16: dict = {}


def snapshot(arrays: dict) -> dict:
    """Host copies of every array in `arrays` (for the inputs-unchanged check)."""
    return {k: (host(v).copy() if hasattr(v, "dtype") else v) for k, v in arrays.items()}


def same_bits(a, b) -> bool:
    a, b = host(a), host(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


def expect_finite(name: str, a) -> None:
    h = host64(a)
    bad = ~np.isfinite(h)
    if bad.any():
        first = int(np.argmax(bad.reshape(-1)))
        raise CheckFailed(f"{name} has {int(bad.sum())} NaN/Inf of {h.size} elements, first at "
                          f"{index_text(first, h.shape)} ({float(h.flat[first])})")


def expect_written(name: str, a) -> None:
    """`a` was poisoned with NaN before the call: every element must have been written."""
    h = host64(a)
    left = np.isnan(h)
    if left.any():
        first = int(np.argmax(left.reshape(-1)))
        raise CheckFailed(f"{name} was passed filled with NaN and {int(left.sum())} of {h.size} elements "
                          f"were never written, first at {index_text(first, h.shape)}")
