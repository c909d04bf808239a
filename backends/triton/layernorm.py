"""layernorm, triton: one program per row, the row kept in registers between its two reductions.

Forward (per row of x (N,C)): load the row once, mean and variance in float32 (two-pass over the
registers, not the E[x^2] - E[x]^2 shortcut), write y, and save mean and rstd (N,) float32 for the
backward. Naive makes ~6 passes over (N,C) arrays; this makes the minimum: read x, write y.

Backward: program g takes a group of rows; per row it recomputes xhat from x, mean and rstd and
writes dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, and it sums
dout * xhat and dout over its rows into float32 partials (G, C) for dweight and dbias. A second
launch adds the G partials, in order, to the gradient buffers (deterministic: no atomics).

Rows up to MAX_C = 16384 channels (a row must fit in one program's registers); wider is refused.
"""

from dataclasses import dataclass

from . import _common, _reduce
from ._runtime import kernel, launch, next_pow2, tl, xp_of

MAX_C = 16384


def _warps(block_c: int) -> int:
    return 4 if block_c <= 1024 else 8 if block_c <= 4096 else 16


@kernel
def _ln_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, C, eps, BLOCK_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_C)
    mask = cols < C
    x = tl.load(x_ptr + row * C + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / C
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(y_ptr + row * C + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@kernel
def _ln_backward(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, db_partial_ptr,
                 N, C, ROWS, BLOCK_C: tl.constexpr):
    grp = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    mask = cols < C
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_C,), dtype=tl.float32)
    db = tl.zeros((BLOCK_C,), dtype=tl.float32)
    first = grp.to(tl.int64) * ROWS
    for i in range(0, ROWS):
        row = first + i
        ok = row < N  # the last group may be short
        x = tl.load(x_ptr + row * C + cols, mask=mask & ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * C + cols, mask=mask & ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row, mask=ok, other=0.0)
        rstd = tl.load(rstd_ptr + row, mask=ok, other=0.0)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        g = dy * w
        c1 = tl.sum(g, axis=0) / C
        c2 = tl.sum(g * xhat, axis=0) / C
        dx = rstd * (g - c1 - xhat * c2)
        tl.store(dx_ptr + row * C + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask & ok)
        dw += dy * xhat
        db += dy
    tl.store(dw_partial_ptr + grp * C + cols, dw, mask=mask)
    tl.store(db_partial_ptr + grp * C + cols, db, mask=mask)


@dataclass
class Saved:
    x: object       # (N,C) the input
    weight: object  # (C,)
    mean: object    # (N,) float32
    rstd: object    # (N,) float32


def forward(inputs, attrs, out=None):
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
    block_c = max(16, next_pow2(C))
    launch(_ln_forward, (N,), x, w, b, y, mean, rstd, C, float(attrs["eps"]),
           BLOCK_C=block_c, num_warps=_warps(block_c))
    return y, Saved(x, w, mean, rstd)


def backward(saved, dout, grads):
    x = saved.x
    _common.check_contiguous("layernorm", dout=dout)
    N, C = x.shape
    xp = xp_of(x)
    dx = _common.grad_buffer("layernorm", grads, "x", x, xp)
    G, rows = _reduce.groups_for(N)
    dw_partial = xp.empty((G, C), dtype="float32")
    db_partial = xp.empty((G, C), dtype="float32")
    block_c = max(16, next_pow2(C))
    launch(_ln_backward, (G,), x, saved.weight, dout, saved.mean, saved.rstd, dx, dw_partial, db_partial,
           N, C, rows, BLOCK_C=block_c, num_warps=_warps(block_c))
    _reduce.finish_into(dw_partial, grads["weight"])
    _reduce.finish_into(db_partial, grads["bias"])
    return {"x": dx, "weight": grads["weight"], "bias": grads["bias"]}
