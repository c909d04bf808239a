"""layernorm, triton: ROWS rows per program as a 2-D block, each row kept in registers between its
reductions.

Forward: program i loads rows i*ROWS .. i*ROWS+ROWS-1 of x (N,C) as one (ROWS, BLOCK_C) block
(BLOCK_C = C rounded up to a power of two, masked; 16-byte vector loads along the row), computes
each row's mean and variance in float32 (two-pass over the registers, not the E[x^2] - E[x]^2
shortcut), writes y and saves mean and rstd (N,) float32 for the backward. One read of x and one
write of y: the minimum. Several rows per program give each SM several independent rows in flight
(a row of GPT-2's 768 bf16 channels is only 1.5 KB).

Backward: program g owns a contiguous range of rows and walks it ROWS rows at a time: it recomputes
xhat from x, mean and rstd and writes dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
g = dout * weight, and it keeps (ROWS, BLOCK_C) float32 sums of dout * xhat and of dout, reduced to
one row each at the end and written side by side to a (G, 2C) float32 partial. One more launch
(_reduce.finish_into) adds the G partials, in a fixed order, to dweight and dbias: deterministic, no
atomics. G is a few programs per SM: enough to fill the GPU, few enough that the partials stay small.

Launch configurations in CONFIG (from the H200 sweep, reports/triton-h200/notes-matmul-layernorm.md).
Rows up to MAX_C = 16384 channels (a row must fit in one program's registers); wider is refused.
"""

from dataclasses import dataclass

from . import _common, _reduce
from ._runtime import cdiv, kernel, launch, next_pow2, tl, xp_of

MAX_C = 16384

#: elements of a (ROWS, BLOCK_C) block per program (ROWS shrinks as rows grow) and warps, forward
#: and backward; the backward's programs per SM (G = that x SMs, at most one per ROWS rows). At
#: C = 768 (4 rows a step), on the GPU: forward 66-75% of the copy bandwidth, backward 45-52%.
CONFIG = {"forward": dict(elems=4096, num_warps=4), "backward": dict(elems=4096, num_warps=4, per_sm=2)}


def _launch_config(C: int, direction: str, config=None) -> dict:
    cfg = dict(config or CONFIG[direction])
    block_c = max(16, next_pow2(C))
    cfg["BLOCK_C"] = block_c
    cfg["ROWS"] = max(1, cfg.pop("elems") // block_c)
    cfg["num_warps"] = max(cfg["num_warps"], 4 if block_c <= 1024 else 8 if block_c <= 4096 else 16)
    return cfg


@kernel
def _ln_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, C, eps,
                ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask = (rows < N)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / C
    xc = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + rows, mean, mask=rows < N)
    tl.store(rstd_ptr + rows, rstd, mask=rows < N)


@kernel
def _ln_backward(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr, N, C, PER_PROGRAM,
                 ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    grp = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros((ROWS, BLOCK_C), dtype=tl.float32)
    db = tl.zeros((ROWS, BLOCK_C), dtype=tl.float32)
    first = grp * PER_PROGRAM
    end = tl.minimum(first + PER_PROGRAM, N)
    for r0 in range(first, end, ROWS):
        rows = r0 + tl.arange(0, ROWS)
        rmask = rows < end
        mask = rmask[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        c1 = tl.sum(g, axis=1) / C
        c2 = tl.sum(g * xhat, axis=1) / C
        dx = rstd[:, None] * (g - c1[:, None] - xhat * c2[:, None])
        tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(partial_ptr + grp * 2 * C + cols, tl.sum(dw, axis=0), mask=cmask)
    tl.store(partial_ptr + grp * 2 * C + C + cols, tl.sum(db, axis=0), mask=cmask)


@dataclass
class Saved:
    x: object       # (N,C) the input
    weight: object  # (C,)
    mean: object    # (N,) float32
    rstd: object    # (N,) float32


def forward(inputs, attrs, out=None, config=None):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    _common.check_float("layernorm", "x", x)
    _common.check_contiguous("layernorm", x=x, weight=w, bias=b)
    N, C = x.shape
    if C > MAX_C:
        raise ValueError(f"layernorm: the triton variant takes rows of at most {MAX_C} channels, got C={C}")
    xp = xp_of(x)
    y = _common.output("layernorm", xp, out, x.shape, x.dtype)
    mean = xp.empty((N,), dtype="float32")
    rstd = xp.empty((N,), dtype="float32")
    cfg = _launch_config(C, "forward", config)
    launch(_ln_forward, (cdiv(N, cfg["ROWS"]),), x, w, b, y, mean, rstd, N, C, float(attrs["eps"]), **cfg)
    return y, Saved(x, w, mean, rstd)


def backward(saved, dout, grads, config=None):
    x = saved.x
    _common.check_contiguous("layernorm", dout=dout)
    N, C = x.shape
    xp = xp_of(x)
    dx = _common.grad_buffer("layernorm", grads, "x", x, xp)
    cfg = _launch_config(C, "backward", config)
    rows = cfg["ROWS"]
    groups = max(1, min(cfg.pop("per_sm") * _common.num_sms(xp), cdiv(N, rows)))  # any G is correct
    per_program = cdiv(cdiv(N, groups), rows) * rows
    groups = cdiv(N, per_program)
    partial = xp.empty((groups, 2 * C), dtype="float32")
    launch(_ln_backward, (groups,), x, saved.weight, dout, saved.mean, saved.rstd, dx, partial,
           N, C, per_program, **cfg)
    _reduce.finish_into(partial, grads["weight"], grads["bias"])
    return {"x": dx, "weight": grads["weight"], "bias": grads["bias"]}
