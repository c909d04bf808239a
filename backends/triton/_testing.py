"""Test-only entry points: this backend's kernels on a machine without a GPU.

`interpreted_variant(op)` is a cpu Variant whose forward and backward run this backend's very
kernels under Triton's interpreter on NumPy arrays, so the conformance suite's case checks (out=
buffers poisoned with NaN, gradients accumulated twice, activation buffers overwritten, inputs
unchanged, bitwise repeatable) run on them in CI exactly as on the GPU. Use float32 and float16:
bfloat16 arithmetic is wrong in Triton 3.6's interpreter.

`recorded_launches(op, dims, dtype)` runs one forward and backward in record mode and returns every
launch they would make (kernel, signature, constexprs, num_warps, num_stages), for compiling each
for sm_90 with `_runtime.compile_recorded`. Parameter gradients are float32 for 16-bit inputs, as
in mixed-precision training.
"""

from __future__ import annotations

import importlib

import numpy as np

from conformance.arrays import param_grad_dtype
from euler_core.ops import OPS
from euler_core.registry import Backend, Variant

from . import _runtime


class InterpretedImpl:
    """forward/backward of backends.triton.<op>, each call under Triton's interpreter."""

    def __init__(self, op: str):
        self.op = op
        self.module = importlib.import_module(f"backends.triton.{op}")

    def forward(self, inputs, attrs, out=None):
        with _runtime.interpreter():
            return self.module.forward(inputs, attrs, out)

    def backward(self, saved, dout, grads):
        with _runtime.interpreter():
            return self.module.backward(saved, dout, grads)


for _op in OPS:
    if importlib.util.find_spec(f"backends.triton.{_op}") is not None:
        globals()[_op] = InterpretedImpl(_op)


def interpreted_variant(op: str) -> Variant:
    """A cpu Variant of `op` running the triton kernels under the interpreter (NumPy arrays)."""
    v = Variant(op, "interpreted", impl=f"backends.triton._testing:{op}", device="cpu",
                dtypes=("float32", "float16"), contiguous=True,
                description="the triton kernels under Triton's interpreter (tests)")
    Backend("triton-interpreter", "the triton backend's kernels under Triton's interpreter", [v])
    return v


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def recorded_launches(op: str, dims: dict, dtype: str, seed: int = 0) -> list[dict]:
    """Every launch one forward and one backward of `op` at `dims` in `dtype` make (nothing runs)."""
    spec = OPS[op]
    impl = importlib.import_module(f"backends.triton.{op}")
    inputs, attrs = spec.example(dims, "float32", np.random.default_rng(seed))
    dt = _np_dtype(dtype)
    inputs = {k: (v.astype(dt) if v.dtype.kind == "f" and k != spec.grad_input else v)  # dlosses stay float32
              for k, v in inputs.items() if v is not None}
    attrs = spec.fill_attrs(attrs)
    with _runtime.recording() as rec:
        out, saved = impl.forward(inputs, attrs, None)
        if spec.output is not None:
            if spec.grad_input:  # the gradient was given ahead: backward gets that very input
                dout = inputs[spec.grad_input]
            else:
                dout = tuple(np.zeros(o.shape, dtype=o.dtype) for o in out) if spec.outputs else \
                    np.zeros(out.shape, dtype=out.dtype)
            grad_dt = _np_dtype(param_grad_dtype(dtype))  # float32 for 16-bit inputs (mixed precision)
            impl.backward(saved, dout, {p: np.zeros(inputs[p].shape, grad_dt) for p in spec.params if p in inputs})
    return list(rec)
