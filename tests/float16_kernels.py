"""Honest float16 kernels for the tests: each naive kernel computed in float32, every stored result
rounded to float16 once.

That is what a GPU kernel for float16 storage does: it loads float16 values, computes in float32
(transcendentals included: tanh, exp and rsqrt come from float32 math, not from float16 ones) and
rounds once when it stores an output or a gradient. The conformance suite's float16 tolerances are
set for exactly that. Running the naive NumPy code on float16 arrays would instead be NumPy's
float16 arithmetic, rounded after every operation, with transcendentals that depend on the CPU
(NumPy's AVX-512 float16 tanh differs from float32-then-rounded by up to 1.5e-3): no GPU kernel
computes like that, and a test built on it passes or fails by the CPU it runs on.

Per the kernel contract (euler_core/ops/base.py): parameter-gradient buffers are float32 (mixed
precision) and accumulated into; an activation-gradient buffer keeps the inputs' dtype, is
overwritten, and a float32 one for float16 inputs is refused. tests/test_conformance_catches.py
registers one per op as backend "half". Nothing here is used by the project itself.
"""

import importlib
from dataclasses import dataclass

import numpy as np

from euler_core.ops import OPS

COMPUTE = np.float32  # the arithmetic's dtype; float16 is only the storage


@dataclass
class Saved:
    inner: object          # the naive kernel's saved state, from the float32 inputs
    dtypes: dict           # input name -> its storage dtype
    given_ahead: tuple     # (the forward's grad_input array, its float32 copy) or ()


def _widen(a):
    return a.astype(COMPUTE) if a is not None and a.dtype == np.float16 else a


def _store(value, dtype, buffer=None):
    """`value` rounded once to `dtype`, written into `buffer` when one is given."""
    if buffer is None:
        return value.astype(dtype)
    buffer[...] = value
    return buffer


def _each(value, fn):
    return tuple(None if v is None else fn(v, i) for i, v in enumerate(value)) if isinstance(value, tuple) \
        else fn(value, None)


class Float32Rounded:
    """One op: the naive kernel in float32, its outputs and gradients stored in the storage dtypes."""

    def __init__(self, op: str):
        self.op, self.spec = op, OPS[op]
        self.naive = importlib.import_module(f"backends.naive.{op}")

    def forward(self, inputs, attrs, out=None):
        wide = {k: _widen(v) for k, v in inputs.items()}
        if self.spec.output is None:  # adamw: updates its inputs in place
            self.naive.forward(wide, attrs, None)
            for k, v in inputs.items():
                if v is not None and wide[k] is not v:
                    v[...] = wide[k]
            return None, None
        y, inner = self.naive.forward(wide, attrs, None)
        dtypes = self.spec.output_dtype(inputs, attrs)
        y = _each(y, lambda v, i: _store(v, dtypes if i is None else dtypes[i],
                                         out if i is None or out is None else out[i]))
        ahead = self.spec.grad_input
        given = (inputs[ahead], wide[ahead]) if ahead and inputs.get(ahead) is not None else ()
        return y, Saved(inner, {k: v.dtype for k, v in inputs.items() if v is not None}, given)

    def backward(self, saved, dout, grads):
        if saved.given_ahead and dout is saved.given_ahead[0]:
            dout = saved.given_ahead[1]  # that very array, as the contract wants it
        else:
            dout = _each(dout, lambda d, i: _widen(d))
        wide = {}
        for name, buffer in grads.items():
            if name not in self.spec.params and buffer.dtype != saved.dtypes[name]:
                raise TypeError(f"{self.op}: grads['{name}'] must have the dtype of input '{name}' "
                                f"({saved.dtypes[name]}), got {buffer.dtype}")
            wide[name] = _widen(buffer)
        result = self.naive.backward(saved.inner, dout, wide)
        stored = {}
        for name, value in result.items():
            if name in grads:
                stored[name] = _store(value, grads[name].dtype, grads[name]) if wide[name] is not grads[name] \
                    else grads[name]
            else:
                stored[name] = _store(value, np.float32 if name in self.spec.params else saved.dtypes[name])
        return stored


#: one honest float16 kernel per op, by name: the Variant impl "float16_kernels:KERNELS.<op>"
class KERNELS:
    pass


for _op in OPS:
    setattr(KERNELS, _op, Float32Rounded(_op))
