"""adamw, cupy_raw: the whole AdamW update in one pass over param, grad, m and v (adamw.cu).

Beyond the plain update, the same pass (the GPU training step's contract, docs/op-contracts.md):
- `param_copy` (optional input, any float dtype: the 16-bit working weights) is written with the
  updated param rounded to its dtype;
- `grad_sumsq` (optional input, (1,) float32: the sum of squares of the whole gradient) clips the
  gradient to `max_norm` (attr, > 0) and skips the update when its square root is not finite;
- `lr` and `step` may be Python numbers or (1,) float32 device arrays, read on the device (never
  copied to the host), so that a captured CUDA graph replays with new values. Python numbers are
  put into a small device array by the launcher (a host-to-device copy: the eager path only).

The kernel: each thread updates CHUNK = 8 consecutive elements, moved as 16-byte vectors (two float4
of each float32 array, one pack of 8 of each 16-bit one) with every load issued before the math,
one block per 8 x THREADS elements. The first version took one element per load in a grid-stride
loop (45% of the copy bandwidth at bf16, 2-byte loads). Where a pointer is not 16-byte aligned (a
slice of the flat buffer at an offset that is not a multiple of 16 bytes) the same kernel goes one
element per load; the last n % 8 elements always do.
"""

import numpy as np

from . import _common
from . import _runtime as rt

#: threads per block; elements each thread updates (adamw.cu's CHUNK)
THREADS, CHUNK = 256, 8


def _device_scalar(name: str, value, xp):
    """A (1,) float32 array holding `value` (the very array when it already is one)."""
    if rt.is_array(value):
        if tuple(value.shape) != (1,) or str(value.dtype) != "float32":
            raise TypeError(f"adamw: a device scalar '{name}' must be a (1,) float32 array, got "
                            f"shape {tuple(value.shape)} dtype {value.dtype}")
        if _common.xp_of(value) is not xp:
            raise TypeError(f"adamw: '{name}' must live on the device of param")
        return value
    return xp.asarray(np.array([float(value)], dtype=np.float32))


def forward(inputs, attrs, out=None):
    p, g, m, v = (inputs[k] for k in ("param", "grad", "m", "v"))
    copy, sumsq = inputs.get("param_copy"), inputs.get("grad_sumsq")
    for name, a in (("param", p), ("grad", g), ("m", m), ("v", v)):
        _common.check_float("adamw", name, a)
        if a.shape != p.shape:
            raise ValueError(f"adamw: '{name}' must have the shape of param {p.shape}, got {a.shape}")
        if name != "param" and a.dtype != p.dtype:
            raise TypeError(f"adamw: '{name}' must have param's dtype {p.dtype}, got {a.dtype}")
    _common.check_contiguous("adamw", param=p, grad=g, m=m, v=v, param_copy=copy)
    if copy is not None:
        _common.check_float("adamw", "param_copy", copy)
        if copy.shape != p.shape:
            raise ValueError(f"adamw: 'param_copy' must have the shape of param {p.shape}, got {copy.shape}")
    if sumsq is not None and (tuple(sumsq.shape) != (1,) or str(sumsq.dtype) != "float32"):
        raise TypeError(f"adamw: 'grad_sumsq' must be a (1,) float32 array, got shape {tuple(sumsq.shape)} "
                        f"dtype {sumsq.dtype}")
    max_norm = float(attrs.get("max_norm", 0.0) or 0.0)
    if max_norm > 0 and sumsq is None:
        raise ValueError("adamw: max_norm > 0 (clipping) needs the 'grad_sumsq' input")
    xp = _common.xp_of(p)
    lr = _device_scalar("lr", attrs["lr"], xp)
    step = _device_scalar("step", attrs["step"], xp)
    defines = {"paramT": _common.ctype(p), "copyT": _common.ctype(copy if copy is not None else p)}
    vec = _common.vector_ok(*(a for a in (p, g, m, v, copy) if a is not None))
    rt.launch(rt.function("adamw", "adamw_update", defines), rt.cdiv(p.size, CHUNK * THREADS), THREADS,
              (p, g, m, v, copy if copy is not None else p, lr, step, sumsq if sumsq is not None else lr,
               np.int64(p.size), _common.f32(attrs["beta1"]), _common.f32(attrs["beta2"]), _common.f32(attrs["eps"]),
               _common.f32(attrs["weight_decay"]), _common.f32(attrs.get("grad_scale", 1.0)), np.float32(max_norm),
               np.int32(copy is not None), np.int32(sumsq is not None), np.int32(vec)))
    return None, None


def backward(saved, dout, grads):  # pragma: no cover - adamw has no backward
    raise TypeError("adamw: has no backward")
