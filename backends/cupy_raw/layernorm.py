"""layernorm, cupy_raw: one warp per row, the row held in registers (layernorm.cu has the kernels).

Forward: one read of x and one write of y (16-byte vectors where C allows), mean and rstd (N,)
float32 saved. Backward: dx in the same one-warp-per-row pattern; dweight and dbias from a fixed
grid of blocks, each writing a (2C) float32 partial, summed in a fixed order by a second launch that
adds them to the caller's buffers (float32 buffers for 16-bit inputs, mixed precision): bitwise
repeatable, no atomics. Rows of at most MAX_C channels (a row lives in one warp's registers).

Tuned for bytes in flight (both kernels are memory-bound): a lane keeps its share of a row as
stored (8 bf16 in 4 registers) and converts where it computes, the forward reads weight and bias
after the statistics, the backward reads weight (as float32) from shared memory at every row, x and
dout are loaded evict-first. At C = 768 in bf16 that took the forward from 92 registers to 46 (44
warps an SM instead of 20), and lets the backward run BACKWARD_WARPS = 8 warps a block, 2 blocks
an SM (16 warps, within 128 registers, no spills) instead of 2 blocks of 4 warps (157 registers).
The finish sums the partials with FINISH_SPLIT threads per column (one thread walking all G
partials was a long chain of L2 reads on 6 blocks).
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

MAX_C = 2048
#: the launch table: warps per block, forward and backward; threads per column in the finish
FORWARD_WARPS, BACKWARD_WARPS, FINISH_SPLIT = 4, 8, 16


@dataclass
class Saved:
    x: object       # (N,C) the input
    weight: object  # (C,)
    mean: object    # (N,) float32
    rstd: object    # (N,) float32


def _backward_blocks_per_sm(per_lane: int) -> int:
    """Blocks of BACKWARD_WARPS an SM is given; the kernel's __launch_bounds__ then holds a thread to
    65536 / (that x 32 x BACKWARD_WARPS) registers. A lane holds 2 float32 sums (dweight, dbias) per
    column it owns, and x and dout as stored: at 24 columns a lane (C = 768) that fits 128 registers
    without spilling in every dtype (ptxas, tests/test_cupy_raw_compile.py); at 32 (C = 1024) 16-bit
    rows spill, so wider rows get 1 block (up to 255 registers)."""
    return 2 if per_lane <= 24 else 1


def _defines(x, C: int, vec: bool, grad_dtype=None) -> dict:
    elems = 16 // x.dtype.itemsize if vec and C % (16 // x.dtype.itemsize) == 0 else 1
    packs = -(-C // (32 * elems))
    return {"floatX": _common.ctype(x), "gradT": _common.ctype(grad_dtype if grad_dtype is not None else x),
            "ELEMS": elems, "PACKS": packs, "BACKWARD_THREADS": 32 * BACKWARD_WARPS,
            "BACKWARD_MIN_BLOCKS": _backward_blocks_per_sm(packs * elems),
            "FINISH_SPLIT": FINISH_SPLIT}


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
    defines = _defines(x, C, _common.vector_ok(x, w, dout, dx), dweight.dtype)
    groups = max(1, min(defines["BACKWARD_MIN_BLOCKS"] * _common.num_sms(xp), rt.cdiv(N, BACKWARD_WARPS)))
    partial = xp.empty((groups, 2 * C), dtype=np.float32)
    rt.launch(rt.function("layernorm", "layernorm_backward", defines), groups, 32 * BACKWARD_WARPS,
              (x, w, dout, saved.mean, saved.rstd, dx, partial, _common.i32(N), _common.i32(C)),
              shared_mem=(2 * C + 32 * defines["PACKS"] * defines["ELEMS"]) * 4)  # partial sums, lane-major weight
    rt.launch(rt.function("layernorm", "layernorm_finish", defines), rt.cdiv(2 * C, 32), (32, FINISH_SPLIT),
              (partial, dweight, dbias, _common.i32(groups), _common.i32(C)))
    return {"x": dx, "weight": dweight, "bias": dbias}
