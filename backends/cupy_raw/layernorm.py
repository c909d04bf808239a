"""layernorm, cupy_raw: one warp per row, the row held in registers (layernorm.cu has the kernels;
layernorm_residual.py launches their fused-residual forms through normalize and normalize_backward).

Forward: one read of x and one write of y (16-byte vectors where C allows), mean and rstd (N,)
float32 saved. Backward: dx in the same one-warp-per-row pattern; dweight and dbias from a fixed
grid of blocks, each writing a (2C) float32 partial, summed in a fixed order by a second launch that
adds them to the caller's buffers (float32 buffers for 16-bit inputs, mixed precision): bitwise
repeatable, no atomics. Rows of at most MAX_C channels (a row lives in one warp's registers).

Tuned for bytes in flight (both kernels are memory-bound; layernorm.cu's header counts the bytes):
a lane keeps its share of a row as stored (8 bf16 in 4 registers) and converts where it computes.
The forward's warps each copy Launch.forward_rows rows into shared memory by cp.async at once (no
registers held for bytes in flight) and normalize them as they land, weight and bias staged once a
block, y stored with the evict-first hint. The backward's warps
(2 blocks of 8 an SM: the dweight/dbias sums take registers) each keep a ring of backward_stages row
slots in shared memory filled by cp.async, the copies of the rows ahead issued before the math on
the current one, so bytes stay in flight without registers; weight (float32) in shared memory too.
Where the ring does not fit the SM's shared memory (float32 rows, wide C) it has fewer stages. The
finish sums the partials with finish_split threads per column.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

MAX_C = 2048


@dataclass(frozen=True)
class Launch:
    """The launch table (bench/tune/cupy_raw_layernorm_sweep.py passes others in explicitly)."""

    forward_warps: int = 4    # warps per forward block
    forward_rows: int = 1     # rows a forward warp stages in shared memory at once (1 to 8)
    backward_warps: int = 8   # warps per backward block (2 blocks an SM at C <= 768)
    backward_stages: int = 2  # ring slots per backward warp (rows in flight: stages - 1, plus the one computed on)
    finish_split: int = 16    # threads per column summing the backward's partials
    # Measured on the H200 at C = 768, bf16 (reports/cupy_raw-h200/layernorm-822732f/): forward rows
    # 1 / 2 / 4 / 8 a warp took 16.4 / 17.0 / 18.1 / 19.2 us at 16384 rows (29.1 / 29.6 / 31.0 / 36.4 at
    # 32768): one row a warp leaves the most warps resident (shared memory, not registers, limits them)
    # and the shortest last wave; backward stages 2 / 3 / 4: 31.5 / 32.7 / 33.9 us (51.1 / 51.8 / 53.2).


LAUNCH = Launch()


@dataclass
class Saved:
    x: object       # (N,C) the input
    weight: object  # (C,)
    mean: object    # (N,) float32
    rstd: object    # (N,) float32


def _backward_blocks_per_sm(per_lane: int) -> int:
    """Blocks of backward_warps (8) an SM is given; the kernel's __launch_bounds__ then holds a thread
    to 65536 / (that x 256) registers. A lane holds 2 float32 sums (dweight, dbias) per
    column it owns, and x and dout as stored: at 24 columns a lane (C = 768) that fits 128 registers
    without spilling in every dtype (ptxas, tests/test_cupy_raw_compile.py); at 32 (C = 1024) 16-bit
    rows spill, so wider rows get 1 block (up to 255 registers)."""
    return 2 if per_lane <= 24 else 1


def _backward_shared(packs: int, elems: int, itemsize: int, warps: int, stages: int, residual: bool = False) -> int:
    """Dynamic shared memory of a backward block (layernorm.cu: weight, then each warp's ring of
    stage_bytes slots, or its 2 ROW_PAD float32 sums, whichever is larger)."""
    row_pad = 32 * packs * elems
    return 4 * row_pad + warps * max(stages * ((2 + residual) * row_pad * itemsize + 16), 8 * row_pad)


def _defines(x, C: int, vec: bool, launch: Launch, grad_dtype=None, residual: bool = False) -> dict:
    elems = 16 // x.dtype.itemsize if vec and C % (16 // x.dtype.itemsize) == 0 else 1
    packs = -(-C // (32 * elems))
    blocks = max(1, _backward_blocks_per_sm(packs * elems) * 8 // launch.backward_warps)  # the same warps an SM
    fits = min(rt.MAX_SHARED_PER_BLOCK, rt.SM_SHARED // blocks - rt.BLOCK_RESERVED_SHARED)
    stages = launch.backward_stages  # fewer where the rings of `blocks` blocks would not fit an SM
    while stages > 1 and _backward_shared(packs, elems, x.dtype.itemsize, launch.backward_warps, stages, residual) > fits:
        stages -= 1
    return {"floatX": _common.ctype(x), "gradT": _common.ctype(grad_dtype if grad_dtype is not None else x),
            "ELEMS": elems, "PACKS": packs, "FORWARD_ROWS": launch.forward_rows,
            "BACKWARD_THREADS": 32 * launch.backward_warps, "BACKWARD_MIN_BLOCKS": blocks,
            "BACKWARD_STAGES": stages, "FINISH_SPLIT": launch.finish_split}


def _check(x, op: str):
    _common.check_float(op, "x", x)
    N, C = x.shape
    if C > MAX_C:
        raise ValueError(f"{op}: the cupy_raw rows variant takes rows of at most {MAX_C} channels "
                         f"(a row lives in one warp's registers), got C={C}")
    return N, C


def forward(inputs, attrs, out=None, launch: Launch = LAUNCH):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    _common.check_contiguous("layernorm", x=x, weight=w, bias=b)
    y = _common.output("layernorm", _common.xp_of(x), out, x.shape, str(x.dtype))
    return y, normalize(x, w, b, y, attrs["eps"], launch)


def normalize(x, w, b, y, eps: float, launch: Launch = LAUNCH, residual=None, op: str = "layernorm") -> Saved:
    """y = layernorm(x) into y; with residual = (a, b), x = a + b written into x first, in the same
    pass (layernorm_residual's forward). The caller has checked the arrays' shapes and layout."""
    N, C = _check(x, op)
    xp = _common.xp_of(x)
    mean = xp.empty((N,), dtype=np.float32)
    rstd = xp.empty((N,), dtype=np.float32)
    sources = (x,) if residual is None else tuple(residual) + (x,)  # read (x), or read (a, b) and write x
    d = _defines(x, C, _common.vector_ok(*sources, w, b, y), launch)
    row_pad = 32 * d["PACKS"] * d["ELEMS"]  # shared memory: weight, bias, each warp's rows (layernorm.cu)
    rows = launch.forward_warps * launch.forward_rows * (1 if residual is None else 2)
    kernel = "layernorm_forward" if residual is None else "layernorm_residual_forward"
    rt.launch(rt.function("layernorm", kernel, d), rt.cdiv(N, launch.forward_rows * launch.forward_warps),
              32 * launch.forward_warps,
              sources + (w, b, y, mean, rstd, _common.i32(N), _common.i32(C), _common.f32(eps)),
              shared_mem=(2 + rows) * row_pad * x.dtype.itemsize)
    return Saved(x, w, mean, rstd)


def backward(saved, dout, grads, launch: Launch = LAUNCH):
    _common.check_contiguous("layernorm", dout=dout)
    dx = _common.grad_buffer("layernorm", grads, "x", saved.x, _common.xp_of(saved.x))
    dweight, dbias = normalize_backward(saved, dout, dx, grads, launch=launch)
    return {"x": dx, "weight": dweight, "bias": dbias}


def normalize_backward(saved, dout, dx, grads, launch: Launch = LAUNCH, dresidual=None, op: str = "layernorm"):
    """dx = layernorm's input gradient (plus dresidual, the fused residual's stream gradient, where
    given: layernorm_residual's backward) into dx; grads["weight"] and grads["bias"] accumulated and
    returned."""
    x, w = saved.x, saved.weight
    N, C = _check(x, op)
    xp = _common.xp_of(x)
    dweight, dbias = grads["weight"], grads["bias"]
    _common.check_param_grad(op, "weight", dweight, w)
    _common.check_param_grad(op, "bias", dbias, w)
    if str(dweight.dtype) != str(dbias.dtype):
        raise TypeError(f"{op}: grads['weight'] and grads['bias'] must share a dtype, got "
                        f"{dweight.dtype} and {dbias.dtype}")
    streams = (dout,) if dresidual is None else (dout, dresidual)
    d = _defines(x, C, _common.vector_ok(x, w, *streams, dx), launch, dweight.dtype, residual=dresidual is not None)
    warps = launch.backward_warps
    groups = max(1, min(d["BACKWARD_MIN_BLOCKS"] * _common.num_sms(xp), rt.cdiv(N, warps)))
    partial = xp.empty((groups, 2 * C), dtype=np.float32)
    kernel = "layernorm_backward" if dresidual is None else "layernorm_residual_backward"
    rt.launch(rt.function("layernorm", kernel, d), groups, 32 * warps,
              (x, w) + streams + (saved.mean, saved.rstd, dx, partial, _common.i32(N), _common.i32(C)),
              shared_mem=_backward_shared(d["PACKS"], d["ELEMS"], x.dtype.itemsize, warps, d["BACKWARD_STAGES"],
                                          dresidual is not None))
    rt.launch(rt.function("layernorm", "layernorm_finish", d), rt.cdiv(2 * C, 32), (32, launch.finish_split),
              (partial, dweight, dbias, _common.i32(groups), _common.i32(C)))
    return dweight, dbias
