"""Registers the naive backend: one readable NumPy variant ("reference") of every op."""

from euler_core.ops import OPS
from euler_core.registry import Backend, Variant, hookimpl


@hookimpl
def nanoeuler_backends():
    variants = [Variant(op, "reference", impl=f"backends.naive.{op}", device="cpu",
                        dtypes=("float64", "float32"), description="plain NumPy, written to be read")
                for op in OPS]
    return [Backend("naive", "NumPy on the CPU: the readable reference, float64-capable", variants)]
