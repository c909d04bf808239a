"""layernorm, triton: ROWS rows per program as a 2-D block, each row kept in registers between its
reductions.

Forward: program i loads rows i*ROWS .. i*ROWS+ROWS-1 of x (N,C) as one (ROWS, BLOCK_C) block
(BLOCK_C = C rounded up to a power of two, masked; 16-byte vector loads along the row), computes
each row's mean and variance in float32 (two-pass over the registers, not the E[x^2] - E[x]^2
shortcut), writes y and saves mean and rstd (N,) float32 for the backward. One read of x and one
write of y: the minimum. x is read once and y is not read again here, so both go through the L2 with
the evict-first policy (on the H200: about 1 us of 17-30 us). Several rows per program give each SM
several independent rows in flight (a row of GPT-2's 768 bf16 channels is only 1.5 KB).

Backward: G = a few programs per SM (as many as fit at once); program g walks row blocks g, g + G,
g + 2G, ... (ROWS rows each), with the loads of the next blocks issued while this one is computed
(tl.range num_stages, through shared memory). For each block it recomputes xhat from x, mean and
rstd and writes dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, and adds
the block's column sums of dout * xhat and of dout (within each thread: a thread holds all ROWS rows
of its columns) to two float32 rows, written side by side to a (G, 2C) partial at the end. One more
launch (_reduce.finish_into) adds the G partials, in a fixed order, to dweight and dbias:
deterministic, no atomics. On the GPU that launch is a programmatic dependent one: the backward
lets it start as soon as its own programs have started (gdc_launch_dependents), and it waits on the
GPU for the backward's end before reading the partials, so its launch latency hides behind the
backward's work (H200 sweep: 29.4 -> 26.2 us at 16384 rows, 46.9 -> 43.8 us at 32768).

Launch configurations: CONFIG, one entry per direction, for every C (ROWS and the warps follow
from C); the measurements behind it are in reports/triton-h200/notes-layernorm.md, the designs that
lost in bench/tune/layernorm_sweep.py. `normalize` and `normalize_backward` take another
configuration through their `config` argument.

Not done: rows wider than MAX_C = 16384 channels (a row must fit in one program's registers) are
refused, not split across programs; the statistics are not computed in one pass (Welford), since
the row is in registers anyway; dweight and dbias are not accumulated with atomics (the partials
keep them bitwise repeatable).

The same two kernels serve the fused `layernorm_residual` (layernorm_residual.py), each with one
switch: the forward's RESIDUAL loads a and b instead of x, writes x = a + b (rounded to the storage
dtype, exactly as the residual op would) and normalises that; the backward's DRESIDUAL adds the
residual stream's own gradient to dx as it stores it. `normalize` and `normalize_backward` are
the host launchers both ops call.
"""

from dataclasses import dataclass

from . import _common, _reduce
from ._runtime import cdiv, dependent_launch, gdc_launch_dependents, kernel, launch, next_pow2, tl, xp_of

MAX_C = 16384

@dataclass(frozen=True)
class RowsConfig:
    """A launch configuration of either kernel: (ROWS, BLOCK_C) blocks of about `elems` elements
    (ROWS = elems // BLOCK_C, at least 1), at least `num_warps` warps (more for wide rows); the
    backward also has `per_sm` programs per SM (G = that x SMs, at most one per block) and a
    pipeline of `stages` blocks (1 where they would not fit in PIPELINE_BYTES)."""
    elems: int
    num_warps: int
    per_sm: int = 0   # backward only
    stages: int = 1   # backward only


#: At C = 768 (4 rows a block, 4 warps; the backward 3 programs per SM and 3 stages), on the H200
#: (`euler bench ops`, reports/triton-h200/notes-layernorm.md, "Adopted after the sweeps"): forward
#: 83% of the copy bandwidth at N = 16384 and 32768, backward 68% and 81% (with the dependent
#: finish launch; its main kernel alone is 23 us of the 26 at N = 16384).
CONFIG = {"forward": RowsConfig(elems=4096, num_warps=4),
          "backward": RowsConfig(elems=4096, num_warps=4, per_sm=3, stages=3)}

#: shared memory the backward's pipeline may take per program (x and dout blocks, per stage)
PIPELINE_BYTES = 100 * 1024


def _blocks(C: int, cfg: RowsConfig) -> dict:
    """BLOCK_C, ROWS and num_warps for rows of C channels."""
    block_c = max(16, next_pow2(C))
    return {"BLOCK_C": block_c, "ROWS": max(1, cfg.elems // block_c),
            "num_warps": max(cfg.num_warps, 4 if block_c <= 1024 else 8 if block_c <= 4096 else 16)}


@kernel
def _ln_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, C, eps, a_ptr, r_ptr,
                ROWS: tl.constexpr, BLOCK_C: tl.constexpr, RESIDUAL: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < N
    base = rows.to(tl.int64) * C
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    mask = rmask[:, None] & cmask[None, :]
    offs = base[:, None] + cols[None, :]
    if RESIDUAL:  # x = a + r, rounded to the storage dtype, written (the stream), then normalised
        a = tl.load(a_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        r = tl.load(r_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        x_stored = (a + r).to(x_ptr.dtype.element_ty)
        tl.store(x_ptr + offs, x_stored, mask=mask)
        x = x_stored.to(tl.float32)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / C
    xc = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + base[:, None] + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")
    tl.store(mean_ptr + rows, mean, mask=rmask)
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


@kernel
def _ln_backward(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr, N, C, dres_ptr,
                 ROWS: tl.constexpr, BLOCK_C: tl.constexpr, STAGES: tl.constexpr, EARLY_FINISH: tl.constexpr,
                 DRESIDUAL: tl.constexpr):
    if EARLY_FINISH:  # the finishing launch may start now: it waits on the GPU for this grid's end
        gdc_launch_dependents()
    grp = tl.program_id(0)
    groups = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_C,), dtype=tl.float32)
    db = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for i in tl.range(0, tl.cdiv(tl.cdiv(N, ROWS) - grp, groups), num_stages=STAGES):
        rows = (grp + i * groups) * ROWS + tl.arange(0, ROWS)
        rmask = rows < N
        base = rows.to(tl.int64)[:, None] * C
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)[:, None]
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)[:, None]
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        g = dy * w[None, :]
        c1 = (tl.sum(g, axis=1) / C)[:, None]
        c2 = (tl.sum(g * xhat, axis=1) / C)[:, None]
        dx = rstd * (g - c1 - xhat * c2)
        if DRESIDUAL:  # x also reaches the loss directly (layernorm_residual's stream gradient)
            dx += tl.load(dres_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + base + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        db += tl.sum(dy, axis=0)
    tl.store(partial_ptr + grp * 2 * C + cols, dw, mask=cmask)
    tl.store(partial_ptr + grp * 2 * C + C + cols, db, mask=cmask)


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
    y = _common.output("layernorm", xp_of(x), out, x.shape, x.dtype)
    return y, normalize(x, w, b, y, attrs["eps"])


def normalize(x, weight, bias, y, eps, residual=None, op="layernorm", config: RowsConfig | None = None) -> Saved:
    """y (N,C) = layernorm(x); returns the Saved of the backward. With residual = (a, b), x is an
    output: first x = a + b is written into it (layernorm_residual). `config` replaces
    CONFIG["forward"]."""
    N, C = x.shape
    if C > MAX_C:
        raise ValueError(f"{op}: the triton variant takes rows of at most {MAX_C} channels, got C={C}")
    xp = xp_of(x)
    mean = xp.empty((N,), dtype="float32")
    rstd = xp.empty((N,), dtype="float32")
    blocks = _blocks(C, config or CONFIG["forward"])
    a, r = residual if residual is not None else (x, x)
    launch(_ln_forward, (cdiv(N, blocks["ROWS"]),), x, weight, bias, y, mean, rstd, N, C, float(eps), a, r,
           RESIDUAL=residual is not None, **blocks)
    return Saved(x, weight, mean, rstd)


def backward(saved, dout, grads):
    _common.check_contiguous("layernorm", dout=dout)
    dx = _common.grad_buffer("layernorm", grads, "x", saved.x, xp_of(saved.x))
    dw, db = normalize_backward(saved, dout, dx, grads)
    return {"x": dx, "weight": dw, "bias": db}


def normalize_backward(saved, dout, dx, grads, dresidual=None, op="layernorm", config: RowsConfig | None = None):
    """dx (N,C) = layernorm's input gradient (+ dresidual, layernorm_residual's stream gradient);
    grads["weight"], grads["bias"] (C) += their gradients, and returned. `config` replaces
    CONFIG["backward"]."""
    x = saved.x
    N, C = x.shape
    xp = xp_of(x)
    dw = _common.param_grad(op, grads, "weight", (C,), x.dtype)  # float32 for 16-bit x: mixed precision
    db = _common.param_grad(op, grads, "bias", (C,), x.dtype)
    cfg = config or CONFIG["backward"]
    blocks = _blocks(C, cfg)
    groups = max(1, min(cfg.per_sm * _common.num_sms(xp), cdiv(N, blocks["ROWS"])))  # any G is correct
    arrays = 2 if dresidual is None else 3  # blocks of x and dout (and dresidual) in flight per stage
    stage_bytes = arrays * blocks["ROWS"] * blocks["BLOCK_C"] * x.dtype.itemsize
    stages = cfg.stages if cfg.stages * stage_bytes <= PIPELINE_BYTES else 1
    partial = xp.empty((groups, 2 * C), dtype="float32")
    launch(_ln_backward, (groups,), x, saved.weight, dout, saved.mean, saved.rstd, dx, partial, N, C,
           dx if dresidual is None else dresidual, STAGES=stages, EARLY_FINISH=dependent_launch(xp),
           DRESIDUAL=dresidual is not None, **blocks)
    _reduce.finish_into(partial, dw, db)
    return dw, db
