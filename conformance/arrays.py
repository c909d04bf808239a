"""Array helpers of the suite: dtypes it can make here, host/device moves, comparisons that explain.

Everything is compared on the host in float64. A comparison that fails says how many elements are
off, where the worst one is, what it was and what it should have been.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from euler_core.device import to_device


class CheckFailed(AssertionError):
    """A check found the variant wrong; the message says how."""


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


def np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


#: 16-bit storage dtypes: their variants accumulate parameter gradients into float32 buffers
HALF_DTYPES = ("float16", "bfloat16")


def param_grad_dtype(dtype: str) -> str:
    """The dtype of the parameter-gradient buffers for inputs of `dtype` (mixed precision: float32
    for float16/bfloat16 inputs, whose float32 master weights take float32 gradients; else `dtype`).
    Activation gradients keep the inputs' dtype."""
    return "float32" if dtype in HALF_DTYPES else dtype


def is_float(a) -> bool:
    return hasattr(a, "dtype") and (np.issubdtype(np.dtype(a.dtype), np.floating) or str(a.dtype) == "bfloat16")


def host(a):
    """A NumPy copy-or-view of a NumPy or CuPy array (None stays None)."""
    return None if a is None else np.asarray(to_device(a, "cpu"))


def host64(a):
    return None if a is None else host(a).astype(np.float64)


def snapshot(arrays: dict) -> dict:
    """Host copies of every array in `arrays` (for the inputs-unchanged check)."""
    return {k: (host(v).copy() if hasattr(v, "dtype") else v) for k, v in arrays.items()}


def same_bits(a, b) -> bool:
    a, b = host(a), host(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


def _fmt_index(idx, shape):
    return str(tuple(int(i) for i in np.unravel_index(idx, shape))) if shape else "()"


def compare(name: str, got, ref, tol, what="the float64 naive reference", outliers_per_million: float = 0.0) -> str:
    """Raise CheckFailed unless |got - ref| <= rtol |ref| + atol rms(ref) everywhere (see tolerances).

    `outliers_per_million` > 0 (the benchmark's check at shapes far larger than the suite's cases)
    lets that many elements in a million exceed the bound by at most 2x, all finite: at millions of
    elements, a bf16 kernel's rounding puts a few elements past a per-element bound that is exact at
    the suite's sizes (euler_core/bench/shapes.py). Returns a note on the outliers it let pass ('' if none)."""
    g = host64(got)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        raise CheckFailed(f"{name}: shape {g.shape}, expected {r.shape}")
    if g.size == 0:
        return ""
    scale = max(float(np.sqrt(np.mean(r * r))), 1e-300)
    allowed = tol.rtol * np.abs(r) + tol.atol * scale
    err = np.abs(g - r)
    bad = ~(err <= allowed)  # NaN in got counts as bad
    if not bad.any():
        return ""
    ratio = np.where(np.isfinite(err), err / allowed, np.inf)
    worst = int(np.argmax(np.where(bad, ratio, -1.0)))
    n_bad = int(bad.sum())
    where = (f"{n_bad} of {g.size} elements ({tol}): "
             f"worst at {_fmt_index(worst, g.shape)}: got {float(g.flat[worst]):.10g}, expected {float(r.flat[worst]):.10g} "
             f"(|err| {err.flat[worst]:.3g}, allowed {allowed.flat[worst]:.3g}; max |err| overall "
             f"{np.nanmax(err) if np.isfinite(err).any() else float('nan'):.3g}, rms(ref) {scale:.3g})")
    if n_bad <= g.size * outliers_per_million / 1e6 and ratio.flat[worst] <= 2.0:
        return f"{name}: {where}, within the {outliers_per_million:g}-per-million outlier allowance"
    raise CheckFailed(f"{name} differs from {what} at {where}")


def expect_finite(name: str, a) -> None:
    h = host64(a)
    bad = ~np.isfinite(h)
    if bad.any():
        first = int(np.argmax(bad.reshape(-1)))
        raise CheckFailed(f"{name} has {int(bad.sum())} NaN/Inf of {h.size} elements, first at "
                          f"{_fmt_index(first, h.shape)} ({float(h.flat[first])})")


def expect_written(name: str, a) -> None:
    """`a` was poisoned with NaN before the call: every element must have been written."""
    h = host64(a)
    left = np.isnan(h)
    if left.any():
        first = int(np.argmax(left.reshape(-1)))
        raise CheckFailed(f"{name} was passed filled with NaN and {int(left.sum())} of {h.size} elements "
                          f"were never written, first at {_fmt_index(first, h.shape)}")
