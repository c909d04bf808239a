"""layernorm, cupy_raw: one warp per row, the row held in registers (layernorm.cu has the kernels).

Forward: one read of x and one write of y (16-byte vectors where C allows), mean and rstd (N,)
float32 saved. Backward: dx in the same one-warp-per-row pattern; dweight and dbias from a fixed
grid of blocks, each writing a (2C) float32 partial, summed in a fixed order by a second launch that
adds them to the caller's buffers (float32 buffers for 16-bit inputs, mixed precision): bitwise
repeatable, no atomics. Rows of at most MAX_C channels (a row lives in one warp's registers).
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

MAX_C = 2048
#: warps per block, forward and backward; the backward's blocks per SM
FORWARD_WARPS, BACKWARD_WARPS, BACKWARD_BLOCKS_PER_SM = 4, 4, 2


@dataclass
class Saved:
    x: object       # (N,C) the input
    weight: object  # (C,)
    mean: object    # (N,) float32
    rstd: object    # (N,) float32


def _defines(x, C: int, vec: bool, grad_dtype=None) -> dict:
    elems = 16 // x.dtype.itemsize if vec and C % (16 // x.dtype.itemsize) == 0 else 1
    return {"floatX": _common.ctype(x), "gradT": _common.ctype(grad_dtype if grad_dtype is not None else x),
            "ELEMS": elems, "PACKS": -(-C // (32 * elems))}


def _check(x):
    _common.check_float("layernorm", "x", x)
    N, C = x.shape
    if C > MAX_C:
        raise ValueError(f"layernorm: the cupy_raw rows variant takes rows of at most {MAX_C} channels "
                         f"(a row lives in one warp's registers), got C={C}")
    return N, C


def forward(inputs, attrs, out=None):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    _common.check_contiguous("layernorm", x=x, weight=w, bias=b)
    N, C = _check(x)
    xp = _common.xp_of(x)
    y = _common.output("layernorm", xp, out, x.shape, str(x.dtype))
    mean = xp.empty((N,), dtype=np.float32)
    rstd = xp.empty((N,), dtype=np.float32)
    k = rt.function("layernorm", "layernorm_forward", _defines(x, C, _common.vector_ok(x, w, b, y)))
    rt.launch(k, rt.cdiv(N, FORWARD_WARPS), 32 * FORWARD_WARPS,
              (x, w, b, y, mean, rstd, _common.i32(N), _common.i32(C), _common.f32(attrs["eps"])))
    return y, Saved(x, w, mean, rstd)


def backward(saved, dout, grads):
    x, w = saved.x, saved.weight
    _common.check_contiguous("layernorm", dout=dout)
    N, C = _check(x)
    xp = _common.xp_of(x)
    dx = _common.grad_buffer("layernorm", grads, "x", x, xp)
    dweight, dbias = grads["weight"], grads["bias"]
    _common.check_param_grad("layernorm", "weight", dweight, w)
    _common.check_param_grad("layernorm", "bias", dbias, w)
    if str(dweight.dtype) != str(dbias.dtype):
        raise TypeError(f"layernorm: grads['weight'] and grads['bias'] must share a dtype, got "
                        f"{dweight.dtype} and {dbias.dtype}")
    groups = max(1, min(BACKWARD_BLOCKS_PER_SM * _common.num_sms(xp), rt.cdiv(N, BACKWARD_WARPS)))
    partial = xp.empty((groups, 2 * C), dtype=np.float32)
    defines = _defines(x, C, _common.vector_ok(x, w, dout, dx), dweight.dtype)
    rt.launch(rt.function("layernorm", "layernorm_backward", defines), groups, 32 * BACKWARD_WARPS,
              (x, w, dout, saved.mean, saved.rstd, dx, partial, _common.i32(N), _common.i32(C)),
              shared_mem=2 * C * 4)
    rt.launch(rt.function("layernorm", "layernorm_finish", defines), rt.cdiv(2 * C, 256), 256,
              (partial, dweight, dbias, _common.i32(groups), _common.i32(C)))
    return {"x": dx, "weight": dweight, "bias": dbias}
