"""Numerics that the conformance suite and the benchmark share: the one tolerance table, the
comparison against a float64 reference that explains what is off, and the dtype helpers.

The tolerance table: per dtype, forward and gradient separately.

A variant's result `got` passes against the float64 reference `ref` (computed by the naive backend
from the very same, already rounded, inputs) when, element by element,

    |got - ref| <= rtol * |ref| + atol * scale,        scale = max(rms(ref), tiny)

`atol` is relative to the array's root-mean-square, not an absolute number: a loose absolute
tolerance would hide errors in small gradients (crossentropy's are ~1/V), and a tight one would fail
large logits. Where `ref` has many elements near zero (cancellation in a layernorm backward), the
`atol * scale` term is what they are held to.

The 16-bit rows are set for what a GPU kernel for 16-bit storage does: load, compute in float32
(transcendentals too), round once per stored output or gradient, plus the intermediates a kernel
rounds to 16 bits to feed a tensor-core product (P before P @ V in an attention). They are not for
NumPy's own float16 arithmetic, rounded after every operation with transcendentals that differ by
CPU (NumPy's AVX-512 float16 tanh is up to 1.5e-3 off float32-then-rounded): no kernel computes like
that. The naive kernels computed that way and rounded once (tests/float16_kernels.py) use at most
4% of the float16 row on the suite's cases; the rest is the tensor-core intermediates' rounding.

"tf32" is not a storage dtype: a variant that lists "tf32" among its dtypes computes float32 inputs
with TF32 matmuls, and its float32 results are held to the tf32 row instead of the float32 one.

Everything is compared on the host in float64. A comparison that fails says how many elements are
off, where the worst one is, what it was and what it should have been.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .device import array_module, storage_dtype, to_device


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float

    def __str__(self):
        return f"rtol={self.rtol:g}, atol={self.atol:g}*rms(ref)"


#               dtype        forward                       gradient
TOLERANCES: dict[str, dict[str, Tol]] = {
    "float64":  {"forward": Tol(1e-12, 1e-12), "gradient": Tol(1e-11, 1e-11)},
    "float32":  {"forward": Tol(1e-5, 1e-5),   "gradient": Tol(5e-5, 2e-5)},
    "tf32":     {"forward": Tol(1e-3, 1e-3),   "gradient": Tol(3e-3, 2e-3)},
    "float16":  {"forward": Tol(1e-2, 5e-3),   "gradient": Tol(2e-2, 1e-2)},
    "bfloat16": {"forward": Tol(2e-2, 1e-2),   "gradient": Tol(4e-2, 2e-2)},
}


def tolerance(dtype: str, kind: str, variant_dtypes=()) -> Tol:
    """The tolerance for results of `kind` ('forward' or 'gradient') of inputs in `dtype`."""
    row = "tf32" if dtype == "float32" and "tf32" in variant_dtypes else dtype
    return TOLERANCES[row][kind]


class CheckFailed(AssertionError):
    """A check found the variant wrong; the message says how."""


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype (CuPy uses NumPy's) of a dtype name; bfloat16 comes from ml_dtypes."""
    return storage_dtype(name) if name == "bfloat16" else np.dtype(name)


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


def index_text(idx, shape):
    """The flat index `idx` of an array of `shape` as a tuple's text, '(0, 35)'."""
    return str(tuple(int(i) for i in np.unravel_index(idx, shape))) if shape else "()"


def compare(name: str, got, ref, tol, what="the float64 naive reference", outliers_per_million: float = 0.0,
            outlier_factor: float = 2.0) -> str:
    """Raise CheckFailed unless |got - ref| <= rtol |ref| + atol rms(ref) everywhere (see tolerances).

    On the host in float64; on the GPU when `ref` is a CuPy array (the benchmark's reference at a
    timed shape of gigabytes: its float64 copies and error arrays stay on the device).

    `outliers_per_million` > 0 (the benchmark's check at shapes far larger than the suite's cases)
    lets that many elements in a million exceed the bound by at most `outlier_factor`, all finite: at millions of
    elements, a bf16 kernel's rounding puts a few elements past a per-element bound that is exact at
    the suite's sizes (euler_core/measure/shapes.py). Returns a note on the outliers it let pass ('' if none)."""
    if hasattr(ref, "__cuda_array_interface__"):
        xp = array_module("cuda")
        g, r = to_device(got, "cuda").astype(xp.float64), ref.astype(xp.float64, copy=False)
    else:
        xp = np
        g, r = host64(got), np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        raise CheckFailed(f"{name}: shape {tuple(g.shape)}, expected {tuple(r.shape)}")
    if g.size == 0:
        return ""
    scale = max(float(xp.sqrt(xp.mean(r * r))), 1e-300)
    allowed = tol.rtol * xp.abs(r) + tol.atol * scale
    err = xp.abs(g - r)
    bad = ~(err <= allowed)  # NaN in got counts as bad
    if not bool(bad.any()):
        return ""
    ratio = xp.where(xp.isfinite(err), err / allowed, xp.inf)
    worst = int(xp.argmax(xp.where(bad, ratio, -1.0)))
    n_bad = int(bad.sum())

    def at(a):
        return float(a.reshape(-1)[worst])

    largest = float(xp.nanmax(err)) if bool(xp.isfinite(err).any()) else float("nan")
    where = (f"{n_bad} of {g.size} elements ({tol}): "
             f"worst at {index_text(worst, g.shape)}: got {at(g):.10g}, expected {at(r):.10g} "
             f"(|err| {at(err):.3g}, allowed {at(allowed):.3g}; max |err| overall {largest:.3g}, rms(ref) {scale:.3g})")
    if n_bad <= g.size * outliers_per_million / 1e6 and at(ratio) <= outlier_factor:
        return f"{name}: {where}, within the {outliers_per_million:g}-per-million outlier allowance"
    raise CheckFailed(f"{name} differs from {what} at {where}")
