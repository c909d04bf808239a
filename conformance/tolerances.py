"""The one tolerance table of the conformance suite: per dtype, forward and gradient separately.

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
"""

from __future__ import annotations

from dataclasses import dataclass


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

#: the finite-difference check of the reference (float64, central differences, step FD_STEP)
FD_STEP = 1e-6
FD_TOL = Tol(1e-6, 1e-7)


def tolerance(dtype: str, kind: str, variant_dtypes=()) -> Tol:
    """The tolerance for results of `kind` ('forward' or 'gradient') of inputs in `dtype`."""
    row = "tf32" if dtype == "float32" and "tf32" in variant_dtypes else dtype
    return TOLERANCES[row][kind]
