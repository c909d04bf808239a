"""Checks and small helpers the host launchers of this backend share.

The dispatcher (euler_core.kernels.Kernel) already checks shapes, dtypes against the variant's
declared ones, and contiguity; these checks repeat the few a launcher cannot run without, so that a
direct call (a test, a benchmark) also fails with a clear error before any launch.
"""

from __future__ import annotations

import numpy as np

#: the float dtypes every variant of this backend takes
DTYPES = ("float32", "float16", "bfloat16")


def check_float(op: str, name: str, a) -> str:
    dt = str(a.dtype)
    if dt not in DTYPES:
        raise TypeError(f"{op}: the triton backend takes {', '.join(DTYPES)} for '{name}', got {dt}")
    return dt


def check_contiguous(op: str, **arrays) -> None:
    for name, a in arrays.items():
        if a is not None and not a.flags.c_contiguous:
            raise ValueError(f"{op}: the triton backend needs '{name}' C-contiguous; "
                             "pass a contiguous copy (ascontiguousarray)")


def output(op: str, xp, out, shape, dtype, name: str = "out"):
    """`out` checked (shape, dtype, contiguous), or a new uninitialised array."""
    if out is None:
        return xp.empty(shape, dtype=dtype)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: '{name}' must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if str(out.dtype) != str(np.dtype(dtype) if not isinstance(dtype, str) else dtype):
        raise TypeError(f"{op}: '{name}' must have dtype {dtype}, got {out.dtype}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{op}: '{name}' must be C-contiguous")
    return out


def grad_buffer(op: str, grads: dict, name: str, like, xp):
    """The activation-gradient buffer the caller passed (overwritten), or a new array like `like`."""
    return output(op, xp, grads.get(name), like.shape, like.dtype, name=f"grads['{name}']")


def param_grad(op: str, grads: dict, name: str, shape, input_dtype):
    """The parameter-gradient buffer grads[name], which the backward accumulates into, checked: its
    shape, C-contiguous, and its dtype: the inputs' own or, for float16/bfloat16 inputs, float32
    (mixed precision: the sums are kept in float32 whatever the inputs; the kernels add in float32
    and store in the buffer's dtype)."""
    buf = grads.get(name)
    if buf is None:
        raise ValueError(f"{op}: backward needs the gradient buffer grads['{name}']")
    dt, want = str(buf.dtype), str(input_dtype)
    allowed = (want, "float32") if want in ("float16", "bfloat16") else (want,)
    if dt not in allowed:
        raise TypeError(f"{op}: grads['{name}'] must have dtype {' or '.join(allowed)} for {want} inputs, got {dt}")
    if tuple(buf.shape) != tuple(shape):
        raise ValueError(f"{op}: grads['{name}'] must have shape {tuple(shape)}, got {tuple(buf.shape)}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{op}: grads['{name}'] must be C-contiguous")
    return buf


def dot_precision(dtype: str) -> str:
    """float32 inputs are multiplied exactly (IEEE fp32 FMA), as the float32 contract needs; fp16 and
    bf16 go to the tensor cores whatever this says."""
    return "ieee" if dtype == "float32" else "tf32"


#: SMs of the GPU the recorded (compile-test) and interpreted launches are sized for: an H200's
H200_SMS = 132
_SMS: dict = {}


def num_sms(xp) -> int:
    """Multiprocessors of the current GPU (programs-per-SM grid sizing); H200_SMS off the GPU."""
    if xp.__name__ != "cupy":
        return H200_SMS
    dev = xp.cuda.Device().id
    if dev not in _SMS:
        _SMS[dev] = xp.cuda.Device(dev).attributes["MultiProcessorCount"]
    return _SMS[dev]
