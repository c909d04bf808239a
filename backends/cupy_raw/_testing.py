"""Test-only entry point: every launch one forward and one backward of a cupy_raw op would make,
recorded on NumPy arrays with no GPU (backends.cupy_raw._runtime.recording), for compiling each
(source, defines) for sm_90 and checking each launch against its kernel's C signature and sm_90's
limits (tests/test_cupy_raw_compile.py).
"""

from __future__ import annotations

import importlib

import numpy as np

from euler_core.ops import OPS

from . import _common
from . import _runtime as rt


def implementation(op: str, variant: str):
    """The object plugin.py names for (op, variant) of this backend."""
    from .plugin import _VARIANTS
    for o, name, impl, _ in _VARIANTS:
        if o == op and name == variant:
            module_name, _, attr = impl.partition(":")
            obj = importlib.import_module(f"backends.cupy_raw.{module_name}")
            return getattr(obj, attr) if attr else obj
    raise ValueError(f"cupy_raw has no variant {variant!r} of {op}")


def recorded_launches(op: str, variant: str, dims: dict, dtype: str, param_grad_dtype: str | None = None,
                      attrs: dict | None = None, seed: int = 0) -> rt.Recording:
    """Every launch of one forward (and one backward, where the op has one) of `op`'s `variant` at
    `dims` in `dtype`; parameter-gradient buffers in `param_grad_dtype` (default: `dtype`)."""
    spec = OPS[op]
    impl = implementation(op, variant)
    inputs, example_attrs = spec.example(dims, "float32", np.random.default_rng(seed))
    dt = _common.np_dtype(dtype)
    # the gradient given ahead (crossentropy_onepass's dlosses) keeps the losses' dtype, float32
    inputs = {k: (v.astype(dt) if v.dtype.kind == "f" and k != spec.grad_input else v)
              for k, v in inputs.items() if v is not None}
    full_attrs = spec.fill_attrs({**example_attrs, **(attrs or {})})
    with rt.recording() as rec:
        out, saved = impl.forward(inputs, full_attrs, None)
        if spec.output is not None and spec.differentiable and not getattr(spec, "inference_only", False):
            # an op with the gradient given ahead takes that very array back (or None); an op of two
            # outputs (layernorm_residual) a gradient for each
            if spec.grad_input:
                dout = inputs[spec.grad_input]
            elif isinstance(out, tuple):
                dout = tuple(np.ones(o.shape, dtype=o.dtype) for o in out)
            else:
                dout = np.ones(out.shape, dtype=out.dtype)
            gdt = _common.np_dtype(param_grad_dtype or dtype)
            impl.backward(saved, dout, {p: np.zeros(inputs[p].shape, dtype=gdt) for p in spec.params if p in inputs})
    return rec


class EmulatedImpl:
    """forward/backward of one cupy_raw variant, its kernels run by the CPU emulator on NumPy arrays."""

    def __init__(self, op: str, variant: str):
        self.impl = implementation(op, variant)

    def forward(self, inputs, attrs, out=None):
        with rt.emulation():
            return self.impl.forward(inputs, attrs, out)

    def backward(self, saved, dout, grads):
        with rt.emulation():
            return self.impl.backward(saved, dout, grads)


_EMULATED: dict = {}


def emulated(op: str, variant: str) -> EmulatedImpl:
    key = f"{op}__{variant}"
    if key not in _EMULATED:
        _EMULATED[key] = EmulatedImpl(op, variant)
    return _EMULATED[key]


def __getattr__(name: str):  # "layernorm__rows" -> the emulated implementation (a Variant's impl)
    op, sep, variant = name.partition("__")
    if sep and op in OPS:
        return emulated(op, variant)
    raise AttributeError(name)


def emulated_variant(op: str, variant: str):
    """A cpu Variant of `op` running cupy_raw's `variant` kernels in the CPU emulator (tests)."""
    from euler_core.registry import Backend, Variant
    v = Variant(op, variant, impl=f"backends.cupy_raw._testing:{op}__{variant}", device="cpu",
                dtypes=_common.DTYPES, contiguous=op not in ("embedding", "crossentropy", "attention_cached"),
                probe="backends.cupy_raw._emulator:unavailable_reason",
                description="the cupy_raw kernels in the CPU emulator (tests)")
    Backend("cupy_raw-emulated", "the cupy_raw backend's kernels in the CPU emulator", [v])
    return v
