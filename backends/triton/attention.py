"""attention, triton: FlashAttention-2 style causal attention, forward and backward, straight from
the fused qkv (B,T,3C) and into y (B,T,C): no T x T matrix is ever written to memory.

Forward (one program per BLOCK_M queries of one (batch, head)): Q stays in registers; K and V
blocks stream through shared memory; the softmax is computed online: a running row max m and row
sum l, the accumulator rescaled by exp(m_old - m_new) whenever the max grows. Key blocks entirely
below the diagonal run without a mask; only the diagonal blocks pay for one. Scores are kept in
base 2 (scale * log2(e) folded into one multiply, exp2 instead of exp). Saved for the backward:
L = m + log2(l) per row (B,NH,T) float32: the logsumexp, 4 bytes a row instead of T*4; and, for
fp16/bf16 inputs, the output unrounded in float32 (the backward's delta needs it; see Saved).

Backward (FlashAttention-2's split, written out):
    delta = rowsum(dy * y)                      _attn_delta, one pass over y and dy
    dK, dV: one program per BLOCK_N keys        _attn_dkdv: walks the queries at or after its keys,
        P^T = exp2(K Q^T * s - L)                recomputing P from L; dV += P^T dY;
        dS^T = P^T * (V dY^T - delta)            dK += dS^T Q
    dQ: one program per BLOCK_M queries         _attn_dq: walks the keys at or before its queries,
        dQ += (P * (dY V^T - delta)) K
Two kernels instead of one with atomic dQ updates: every gradient element is written by exactly one
program, so results are bitwise repeatable (conformance asks that), at the price of computing
Q K^T twice.

Any T (T=1, ragged T: loads are masked, rows past T carry L = +inf so they contribute nothing) and
any head size HS <= 128 (the head dimension is padded to a power of two >= 16 in registers, masked
in memory); HS > 128 is refused. float32 inputs use IEEE float32 dots (exact contract); fp16 and
bf16 use the tensor cores with float32 accumulation, P and dS rounded to the input dtype before
their products, as FlashAttention does.
"""

import math
from dataclasses import dataclass

from . import _common
from ._runtime import cdiv, kernel, launch, next_pow2, tl, xp_of

MAX_HS = 128
LOG2E = 1.4426950408889634


@kernel
def _attn_forward(qkv_ptr, y_ptr, o32_ptr, lse_ptr, T, C, NH, HS, qk_scale,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  PRECISION: tl.constexpr, SAVE_O32: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    row_stride = 3 * C
    base = qkv_ptr + b.to(tl.int64) * T * row_stride + h * HS
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    mmask = offs_m < T
    q = tl.load(base + offs_m[:, None] * row_stride + offs_d[None, :], mask=mmask[:, None] & dmask[None, :],
                other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    # 1. key blocks wholly before this query block: every score is visible, no mask
    for start_n in range(0, start_m, BLOCK_N):
        kv_rows = (start_n + offs_n)[:, None] * row_stride + offs_d[None, :]
        k = tl.load(base + C + kv_rows, mask=dmask[None, :], other=0.0)
        v = tl.load(base + 2 * C + kv_rows, mask=dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    # 2. the diagonal blocks: causal mask (key <= query) and the ragged end (key < T)
    for start_n in range(start_m, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        cols = start_n + offs_n
        nmask = cols < T
        kv_rows = cols[:, None] * row_stride + offs_d[None, :]
        k = tl.load(base + C + kv_rows, mask=nmask[:, None] & dmask[None, :], other=0.0)
        v = tl.load(base + 2 * C + kv_rows, mask=nmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        visible = (cols[None, :] <= offs_m[:, None]) & nmask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    acc = acc / l_i[:, None]
    y_base = y_ptr + b.to(tl.int64) * T * C + h * HS
    tl.store(y_base + offs_m[:, None] * C + offs_d[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mmask[:, None] & dmask[None, :])
    if SAVE_O32:  # the unrounded output, for the backward's delta (see Saved)
        tl.store(o32_ptr + b.to(tl.int64) * T * C + h * HS + offs_m[:, None] * C + offs_d[None, :], acc,
                 mask=mmask[:, None] & dmask[None, :])
    tl.store(lse_ptr + bh.to(tl.int64) * T + offs_m, m_i + tl.log2(l_i), mask=mmask)


@kernel
def _attn_delta(y_ptr, dy_ptr, delta_ptr, T, C, NH, HS, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < T)[:, None] & (offs_d < HS)[None, :]
    at = b.to(tl.int64) * T * C + h * HS + offs_m[:, None] * C + offs_d[None, :]
    y = tl.load(y_ptr + at, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + at, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh.to(tl.int64) * T + offs_m, tl.sum(y * dy, axis=1), mask=offs_m < T)


@kernel
def _attn_dkdv(qkv_ptr, dy_ptr, lse_ptr, delta_ptr, dqkv_ptr, T, C, NH, HS, qk_scale, sm_scale,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    row_stride = 3 * C
    base = qkv_ptr + b.to(tl.int64) * T * row_stride + h * HS
    dy_base = dy_ptr + b.to(tl.int64) * T * C + h * HS
    stat = bh.to(tl.int64) * T
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    nmask = offs_n < T
    kv_mask = nmask[:, None] & dmask[None, :]
    kv_rows = offs_n[:, None] * row_stride + offs_d[None, :]
    k = tl.load(base + C + kv_rows, mask=kv_mask, other=0.0)
    v = tl.load(base + 2 * C + kv_rows, mask=kv_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for start_m in range(start_n, T, BLOCK_M):
        offs_m = start_m + offs_m0
        mmask = offs_m < T
        q = tl.load(base + offs_m[:, None] * row_stride + offs_d[None, :], mask=mmask[:, None] & dmask[None, :],
                    other=0.0)
        dy = tl.load(dy_base + offs_m[:, None] * C + offs_d[None, :], mask=mmask[:, None] & dmask[None, :],
                     other=0.0)
        lse = tl.load(lse_ptr + stat + offs_m, mask=mmask, other=float("inf"))
        delta = tl.load(delta_ptr + stat + offs_m, mask=mmask, other=0.0)
        st = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale   # (BLOCK_N, BLOCK_M) scores^T
        pt = tl.exp2(st - lse[None, :])
        if start_m < start_n + BLOCK_N:  # a diagonal block: queries before keys see nothing
            pt = tl.where(offs_m[None, :] >= offs_n[:, None], pt, 0.0)
        dv += tl.dot(pt.to(dy.dtype), dy, input_precision=PRECISION)
        dpt = tl.dot(v, tl.trans(dy), input_precision=PRECISION)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PRECISION)
    dk = dk * sm_scale
    dbase = dqkv_ptr + b.to(tl.int64) * T * row_stride + h * HS
    tl.store(dbase + C + kv_rows, dk.to(dqkv_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dbase + 2 * C + kv_rows, dv.to(dqkv_ptr.dtype.element_ty), mask=kv_mask)


@kernel
def _attn_dq(qkv_ptr, dy_ptr, lse_ptr, delta_ptr, dqkv_ptr, T, C, NH, HS, qk_scale, sm_scale,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    row_stride = 3 * C
    base = qkv_ptr + b.to(tl.int64) * T * row_stride + h * HS
    stat = bh.to(tl.int64) * T
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    mmask = offs_m < T
    qmask = mmask[:, None] & dmask[None, :]
    q = tl.load(base + offs_m[:, None] * row_stride + offs_d[None, :], mask=qmask, other=0.0)
    dy = tl.load(dy_ptr + b.to(tl.int64) * T * C + h * HS + offs_m[:, None] * C + offs_d[None, :], mask=qmask,
                 other=0.0)
    lse = tl.load(lse_ptr + stat + offs_m, mask=mmask, other=float("inf"))
    delta = tl.load(delta_ptr + stat + offs_m, mask=mmask, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        offs_n = start_n + offs_n0
        nmask = offs_n < T
        kv_rows = offs_n[:, None] * row_stride + offs_d[None, :]
        k = tl.load(base + C + kv_rows, mask=nmask[:, None] & dmask[None, :], other=0.0)
        v = tl.load(base + 2 * C + kv_rows, mask=nmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        p = tl.exp2(s - lse[:, None])
        if start_n + BLOCK_N > start_m:  # a diagonal block
            p = tl.where((offs_n[None, :] <= offs_m[:, None]) & nmask[None, :], p, 0.0)
        dp = tl.dot(dy, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    dq = dq * sm_scale
    tl.store(dqkv_ptr + b.to(tl.int64) * T * row_stride + h * HS + offs_m[:, None] * row_stride + offs_d[None, :],
             dq.to(dqkv_ptr.dtype.element_ty), mask=qmask)


def _blocks(dtype: str, T: int, HS: int) -> dict:
    """Tile sizes: (forward BLOCK_M, BLOCK_N), backward block, head block, warps."""
    block_d = max(16, next_pow2(HS))
    if dtype == "float32":
        fm, fn, bb = 64, 32, 32
    else:
        fm, fn, bb = 128, 64, 64
    cap = max(16, next_pow2(T))  # short sequences (T=1, tests): smaller tiles, never below 16
    fm, fn, bb = min(fm, cap), min(fn, cap), min(bb, cap)
    warps = 4 if block_d <= 64 else 8
    return dict(fwd_m=fm, fwd_n=fn, bwd=bb, block_d=block_d, warps=warps)


@dataclass
class Saved:
    qkv: object   # (B,T,3C) the input
    out: object   # (B,T,C) the output in float32: the backward's delta = rowsum(dy * out). For fp16 and
                  # bf16 inputs the forward also writes this unrounded copy: delta from the rounded
                  # output is off by ~|dy||y| 2^-9, which dS = P (dP - delta) turns into dq errors
                  # beyond the bf16 tolerance where dP and delta nearly cancel (seen: T257, bf16)
    lse: object   # (B,NH,T) float32: log2-sum-exp2 of each row's scaled scores
    n_head: int


def _check(qkv, n_head):
    dt = _common.check_float("attention", "qkv", qkv)
    _common.check_contiguous("attention", qkv=qkv)
    B, T, C3 = qkv.shape
    HS = C3 // 3 // n_head
    if HS > MAX_HS:
        raise ValueError(f"attention: the triton flash variant takes head sizes up to {MAX_HS}, got "
                         f"HS={HS} (C={C3 // 3}, n_head={n_head})")
    return dt, B, T, C3 // 3, HS


def forward(inputs, attrs, out=None):
    qkv, n_head = inputs["qkv"], attrs["n_head"]
    dt, B, T, C, HS = _check(qkv, n_head)
    xp = xp_of(qkv)
    y = _common.output("attention", xp, out, (B, T, C), qkv.dtype)
    lse = xp.empty((B, n_head, T), dtype="float32")
    o32 = y if dt == "float32" else xp.empty((B, T, C), dtype="float32")
    cfg = _blocks(dt, T, HS)
    qk_scale = LOG2E / math.sqrt(HS)
    launch(_attn_forward, (cdiv(T, cfg["fwd_m"]), B * n_head), qkv, y, o32, lse, T, C, n_head, HS, qk_scale,
           BLOCK_M=cfg["fwd_m"], BLOCK_N=cfg["fwd_n"], BLOCK_D=cfg["block_d"], PRECISION=_common.dot_precision(dt),
           SAVE_O32=o32 is not y, num_warps=cfg["warps"], num_stages=3)
    return y, Saved(qkv, o32, lse, n_head)


def backward(saved, dout, grads):
    qkv, n_head = saved.qkv, saved.n_head
    dt, B, T, C, HS = _check(qkv, n_head)
    _common.check_contiguous("attention", dout=dout)
    xp = xp_of(qkv)
    dqkv = _common.grad_buffer("attention", grads, "qkv", qkv, xp)
    cfg = _blocks(dt, T, HS)
    delta = xp.empty((B, n_head, T), dtype="float32")
    launch(_attn_delta, (cdiv(T, 64), B * n_head), saved.out, dout, delta, T, C, n_head, HS,
           BLOCK_M=64, BLOCK_D=cfg["block_d"])
    sm_scale = 1.0 / math.sqrt(HS)
    common = dict(BLOCK_M=cfg["bwd"], BLOCK_N=cfg["bwd"], BLOCK_D=cfg["block_d"],
                  PRECISION=_common.dot_precision(dt), num_warps=cfg["warps"], num_stages=2)
    grid = (cdiv(T, cfg["bwd"]), B * n_head)
    launch(_attn_dkdv, grid, qkv, dout, saved.lse, delta, dqkv, T, C, n_head, HS, sm_scale * LOG2E, sm_scale,
           **common)
    launch(_attn_dq, grid, qkv, dout, saved.lse, delta, dqkv, T, C, n_head, HS, sm_scale * LOG2E, sm_scale,
           **common)
    return {"qkv": dqkv}
