"""The conformance suite's tolerances: the one table per dtype is the core's (euler_core/numerics.py,
which says what each row is set for: the benchmark's check holds variants to it too); the suite adds
the finite-difference check of the reference.
"""

from __future__ import annotations

from euler_core.numerics import TOLERANCES, Tol, tolerance  # noqa: F401

#: the finite-difference check of the reference (float64, central differences, step FD_STEP)
FD_STEP = 1e-6
FD_TOL = Tol(1e-6, 1e-7)
