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
from .plugin import _VARIANTS, impl_of


class InterpretedImpl:
    """forward/backward of a triton variant's implementation, each call under Triton's interpreter."""

    def __init__(self, impl: str):
        module, _, attr = impl.partition(":")
        self.module = importlib.import_module(module)
        if attr:
            self.module = getattr(self.module, attr)

    def forward(self, inputs, attrs, out=None):
        with _runtime.interpreter():
            return self.module.forward(inputs, attrs, out)

    def backward(self, saved, dout, grads):
        with _runtime.interpreter():
            return self.module.backward(saved, dout, grads)


#: "<op>" (its first variant) and "<op>__<name>" (each variant): the interpreted implementations
for _op, _name, _ in _VARIANTS:
    globals().setdefault(_op, InterpretedImpl(impl_of(_op, _name)))
    globals()[f"{_op}__{_name}"] = InterpretedImpl(impl_of(_op, _name))


def interpreted_variant(op: str, name: str | None = None) -> Variant:
    """A cpu Variant of `op` (its variant `name`, default the first) running the triton kernels under
    the interpreter (NumPy arrays)."""
    attr = op if name is None else f"{op}__{name}"
    v = Variant(op, "interpreted", impl=f"backends.triton._testing:{attr}", device="cpu",
                dtypes=("float32", "float16"), contiguous=True,
                description="the triton kernels under Triton's interpreter (tests)")
    Backend("triton-interpreter", "the triton backend's kernels under Triton's interpreter", [v])
    return v


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def recorded_launches(op: str, dims: dict, dtype: str, seed: int = 0, variant: str | None = None) -> list[dict]:
    """Every launch one forward and one backward of `op` (its variant named `variant`, default the
    first) at `dims` in `dtype` make (nothing runs)."""
    spec = OPS[op]
    impl = InterpretedImpl(impl_of(op, variant or next(n for o, n, _ in _VARIANTS if o == op))).module
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
