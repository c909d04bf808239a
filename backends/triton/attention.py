"""attention, triton: causal attention by FlashAttention-2 (T. Dao, "FlashAttention-2: Faster
Attention with Better Parallelism and Work Partitioning", 2023, arXiv:2307.08691), forward and
backward, straight from the fused qkv (B,T,3C) and into y (B,T,C): no T x T matrix is ever written
to memory.

Forward (the paper's Algorithm 1; one program per BLOCK_M queries of one (batch, head)): Q stays in
registers; K and V blocks stream through shared memory; the softmax is computed online: a running
row max m and row sum l, the accumulator rescaled by exp(m_old - m_new) whenever the max grows and
divided by l once at the end. Key blocks entirely below the diagonal run without a mask; only the
diagonal blocks pay for one. Scores are kept in base 2: the raw dot is scaled by scale * log2(e)
inside the exponent's argument (one FMA per score), exp2 instead of exp. Programs are launched
heaviest first (the last query blocks see the most keys) so that the light first blocks fill the
tail of the launch. Saved for the backward: L = m + log2(l) per row (B,NH,T) float32, the
logsumexp (4 bytes a row instead of T*4), and the output.

Backward (the paper's Algorithm 2, with P recomputed from L), one kernel, one program per BLOCK
rows j of a head:
      delta of queries block j = rowsum(dy * o), o = y + res; stored, then published (a flag)
      dQ of queries block j: walks the keys at or before them (the diagonal steps masked),
        dQ += (P * (dY V^T - delta)) K          P = exp2(Q K^T * s - L), recomputed from L
      the deltas of every later query block: published by their programs, else computed here
      dK, dV of keys block j: walks the queries at or after them (the diagonal steps masked),
        P^T = exp2(K Q^T * s - L)               dV += P^T dY;
        dS^T = P^T * (V dY^T - delta)           dK += dS^T Q
Where the paper's backward parallelises over key blocks only and adds each dQ contribution with
atomics, here program j also owns query block j's dQ: every gradient element is written by exactly
one program, so results are bitwise repeatable (conformance asks that), at the price of computing
Q K^T and dY V^T twice. Key block j has T/BLOCK - j query blocks to walk and query block j has
j + 1 key blocks, so every program does the same work: one launch with no causal tail. The dK/dV
walk takes BLOCK_M1 queries a step and the dQ walk BLOCK_N2 keys a step; steps smaller than BLOCK
keep the two (BLOCK, BLOCK_D) float32 accumulators and the step's score tiles in registers at once.
The delta pass needs no launch (and no pass over y, res and dy of its own): each program computes
its own block's delta first and publishes it (the delta stores, a CTA barrier, then an atomic
exchange of the block's flag with release semantics). Before its dK/dV walk it reads the flags of
every later block (atomic reads, acquire semantics); a block whose flag is not yet set, it computes
itself (the same code on the same inputs, so a second writer stores the same bits), then a barrier.
Nothing ever waits, so no launch order has to be assumed for progress. In practice the fallback
never runs: the grid puts the last block of a head first (program_id 0), later blocks start first,
and the dQ walk comes before the flag reads, so by then the later blocks' deltas are long
published. (Waiting on the flags, or on a ticket from an atomic counter, was measured too:
reports/triton-h200/notes-attention.md, "After round r3".)

Ordered backward (the `ordered` variant; FlashAttention-3's deterministic mode is the same idea):
one walk per key block j over the queries at or after it, five products a step where the backward
above has seven, Q K^T and dY V^T computed once:
      P^T = exp2(K Q^T * s - L),  dV += P^T dY,  dS^T = P^T * (V dY^T - delta),  dK += dS^T Q,
      and query block i's share of dQ, dS_ij K_j, added to a float32 accumulator
Float32 additions in any order would make dQ differ from call to call, so the shares of query
block i are added in one fixed order, key block i first (its diagonal step stores its share), key
block 0 last (which adds its own, scales the sum and writes dQ). A count per query block says how
many key blocks have added theirs: key block j waits until it reads i - j (acquire), adds by
float32 atomics (performed at the L2, in the order the counts impose), then, once every thread of
the program has issued its additions (a barrier), one thread adds 1 (release). The order costs
little waiting: all key blocks of a head start together, and key block j + 1 reaches query block i
one step before key block j does. It cannot deadlock: a program takes its key block from a ticket
(an atomic counter per head; tickets hand out the last key block first), so it waits only on
programs that took earlier tickets, which are running or done. delta of query block i is computed
by its first adder and read by the others after their wait (by atomics: Triton prefetches plain
loads ahead of the loop's waits). The accumulator (B, NH, T, HS) float32 is scratch of the call.
Measured on the H200 it is slower than the backward above, so it is not the default: 1,357 against
1,172 us at B=64 (0.86x), 0.84x at B=16; in the B=64 training step 561,574 tokens/s against
568,122. The order costs ~170 us of that and the atomic reads of delta ~80, but even without them its
five products a step take as long as the other's seven (reports/triton-h200/notes-attention.md,
"Eighth session": the ablation and ncu).

Saved: fp16/bf16 outputs are rounded; delta from the rounded y is off by ~|dy||y| 2^-9, which dS =
P (dP - delta) turns into dq errors beyond the bf16 tolerance where dP and delta nearly cancel (seen
on the GPU at T257, bf16; a NumPy model of the rounding fails the HS64 case too). So the forward
also writes the rounding residual res = o - y in the input dtype (2 bytes an element, not a float32
copy of o): y + res restores o to ~16 bits. The backward reads the caller's y, which must not be
overwritten in between (the model never does).

Any T (T=1, ragged T: loads are masked, rows past T carry L = +inf so they contribute nothing) and
any head size HS <= 128 (the head dimension is padded to a power of two >= 16 in registers, masked
in memory; HS is a compile-time constant, so the mask vanishes when HS is a power of two); HS > 128
is refused. float32 inputs use IEEE float32 dots (exact contract); fp16 and bf16 use the tensor
cores with float32 accumulation, P and dS rounded to the input dtype before their products, as
FlashAttention does. Launch configurations: TILES, one `Tiles` per dtype class and head size.

Not done: attention without the causal mask, dropout, grouped or multi-query heads, rows of
different lengths (attention_cached.py has those for decoding), and the overlap of softmax and
tensor-core work that FlashAttention-3 gets from Hopper's warp specialisation (Triton 3.6 does not
schedule it for sm_90; the forward stays at ~0.91x cuDNN's, notes-attention.md).
"""

import math
from dataclasses import dataclass, replace

from . import _common
from ._runtime import cdiv, compiled, kernel, launch, next_pow2, tl, triton, xp_of

MAX_HS = 128
LOG2E = 1.4426950408889634


@kernel
def _attn_forward(qkv_ptr, y_ptr, res_ptr, lse_ptr, T, qk_scale, C: tl.constexpr, NH: tl.constexpr,
                  HS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  PRECISION: tl.constexpr, SAVE_RES: tl.constexpr):
    # grid (blocks, B*NH): one head's blocks run together (its K, V shared in L2), its last block first
    bh = tl.program_id(1)
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    b = bh // NH
    h = bh % NH
    base = qkv_ptr + b.to(tl.int64) * T * (3 * C) + h * HS
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    mmask = offs_m < T
    q = tl.load(base + offs_m[:, None] * (3 * C) + offs_d[None, :], mask=mmask[:, None] & dmask[None, :],
                other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    # 1. key blocks wholly before this query block: every score is visible, no mask
    for start_n in range(0, start_m, BLOCK_N):
        kv_rows = (start_n + offs_n)[:, None] * (3 * C) + offs_d[None, :]
        k = tl.load(base + C + kv_rows, mask=dmask[None, :], other=0.0)
        v = tl.load(base + 2 * C + kv_rows, mask=dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    # 2. the diagonal blocks: causal mask (key <= query; keys past T only meet rows past T)
    for start_n in range(start_m, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
        cols = start_n + offs_n
        kv_rows = cols[:, None] * (3 * C) + offs_d[None, :]
        kv_mask = (cols < T)[:, None] & dmask[None, :]
        k = tl.load(base + C + kv_rows, mask=kv_mask, other=0.0)
        v = tl.load(base + 2 * C + kv_rows, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        s = tl.where(cols[None, :] <= offs_m[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    acc = acc / l_i[:, None]
    at = b.to(tl.int64) * T * C + h * HS + offs_m[:, None] * C + offs_d[None, :]
    ymask = mmask[:, None] & dmask[None, :]
    y = acc.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + at, y, mask=ymask)
    if SAVE_RES:  # what rounding y lost, for the backward's delta (see Saved)
        tl.store(res_ptr + at, (acc - y.to(tl.float32)).to(res_ptr.dtype.element_ty), mask=ymask)
    tl.store(lse_ptr + bh.to(tl.int64) * T + offs_m, m_i + tl.log2(l_i), mask=mmask)


@triton.jit
def _scores_dv_dp(k, v, qt, dy, lse, dv, offs_m, offs_n, qk_scale, PRECISION: tl.constexpr, MASK: tl.constexpr):
    """One step of a key block's walk: P^T = exp2(K Q^T * s - L) (BLOCK_N, BLOCK_M), dV += P^T dY, and
    dP^T = V dY^T; MASK: the causal mask (queries before a key see nothing of it)."""
    st = tl.dot(k, qt, input_precision=PRECISION)                                # S^T
    pt = tl.exp2(st * qk_scale - lse[None, :])
    if MASK:
        pt = tl.where(offs_m[None, :] >= offs_n[:, None], pt, 0.0)
    dv = tl.dot(pt.to(dy.dtype), dy, dv, input_precision=PRECISION)
    return pt, dv, tl.dot(v, tl.trans(dy), input_precision=PRECISION)


@triton.jit
def _dkdv_steps(dk, dv, k, v, offs_n, q_base, dy_base, lse_ptr, delta_ptr, lo, hi, T, qk_scale,
                C: tl.constexpr, HS: tl.constexpr, BLOCK_M1: tl.constexpr, BLOCK_D: tl.constexpr,
                PRECISION: tl.constexpr, MASK: tl.constexpr):
    """dK, dV of one key block (k, v (BLOCK_N, BLOCK_D)) from the queries lo..hi, BLOCK_M1 a step;
    MASK: the causal mask (the diagonal steps)."""
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    for start_m in range(lo, hi, BLOCK_M1):
        offs_m = start_m + tl.arange(0, BLOCK_M1)
        mmask = offs_m < T
        qt = tl.load(q_base + offs_m[None, :] * (3 * C) + offs_d[:, None], mask=dmask[:, None] & mmask[None, :],
                     other=0.0)                                                  # (BLOCK_D, BLOCK_M1) Q^T
        dy = tl.load(dy_base + offs_m[:, None] * C + offs_d[None, :], mask=mmask[:, None] & dmask[None, :],
                     other=0.0)
        lse = tl.load(lse_ptr + offs_m, mask=mmask, other=float("inf"))
        delta = tl.load(delta_ptr + offs_m, mask=mmask, other=0.0)
        pt, dv, dpt = _scores_dv_dp(k, v, qt, dy, lse, dv, offs_m, offs_n, qk_scale, PRECISION, MASK)
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _dq_steps(dq, q, dy, lse, delta, offs_m, k_base, lo, hi, T, qk_scale, C: tl.constexpr, HS: tl.constexpr,
              BLOCK_N2: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr, MASK: tl.constexpr):
    """dQ of one query block (q, dy (BLOCK_M, BLOCK_D)) from the keys lo..hi, BLOCK_N2 a step;
    MASK: the causal mask (the diagonal steps)."""
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    for start_n in range(lo, hi, BLOCK_N2):
        offs_n = start_n + tl.arange(0, BLOCK_N2)
        kv_mask = dmask[:, None] & (offs_n < T)[None, :]
        kv_cols = offs_n[None, :] * (3 * C) + offs_d[:, None]
        kt = tl.load(k_base + kv_cols, mask=kv_mask, other=0.0)                  # (BLOCK_D, BLOCK_N2) K^T
        vt = tl.load(k_base + C + kv_cols, mask=kv_mask, other=0.0)              # V^T
        s = tl.dot(q, kt, input_precision=PRECISION)
        p = tl.exp2(s * qk_scale - lse[:, None])
        if MASK:  # keys after a query (and so every key past T of a real row) are invisible
            p = tl.where(offs_n[None, :] <= offs_m[:, None], p, 0.0)
        dp = tl.dot(dy, vt, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, input_precision=PRECISION)
    return dq


@triton.jit
def _delta_rows(y_ptr, res_ptr, dy_ptr, out_base, offs, offs_d, T, C: tl.constexpr, HS: tl.constexpr,
                HAS_RES: tl.constexpr):
    """delta = rowsum(dy * o), o = y + res, for the rows offs of one head; also dy (input dtype)."""
    rmask = (offs < T)[:, None] & (offs_d < HS)[None, :]
    at = out_base + offs[:, None] * C + offs_d[None, :]
    dy = tl.load(dy_ptr + at, mask=rmask, other=0.0)
    o = tl.load(y_ptr + at, mask=rmask, other=0.0).to(tl.float32)
    if HAS_RES:
        o += tl.load(res_ptr + at, mask=rmask, other=0.0).to(tl.float32)
    return tl.sum(o * dy.to(tl.float32), axis=1), dy


@kernel
def _attn_backward(qkv_ptr, y_ptr, res_ptr, dy_ptr, lse_ptr, delta_ptr, flag_ptr, dqkv_ptr, T, qk_scale, sm_scale,
                   C: tl.constexpr, NH: tl.constexpr, HS: tl.constexpr, BLOCK: tl.constexpr,
                   BLOCK_M1: tl.constexpr, BLOCK_N2: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
                   HAS_RES: tl.constexpr):
    # grid (blocks, B*NH), the last block of a head first (module docstring, Backward)
    nblk = tl.num_programs(0)
    j = nblk - 1 - tl.program_id(0)
    start = j * BLOCK
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    base = qkv_ptr + b.to(tl.int64) * T * (3 * C) + h * HS
    dbase = dqkv_ptr + b.to(tl.int64) * T * (3 * C) + h * HS
    out_base = b.to(tl.int64) * T * C + h * HS  # of y, res and dy
    lse_base = lse_ptr + bh.to(tl.int64) * T
    delta_base = delta_ptr + bh.to(tl.int64) * nblk * BLOCK  # whole blocks a row (see backward())
    offs = start + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    rmask = (offs < T)[:, None] & dmask[None, :]
    rows = offs[:, None] * (3 * C) + offs_d[None, :]
    end = tl.minimum(start + BLOCK, T)

    # delta of queries start..start+BLOCK, published: stored, then the block's flag set (release)
    delta, dy = _delta_rows(y_ptr, res_ptr, dy_ptr, out_base, offs, offs_d, T, C, HS, HAS_RES)
    tl.store(delta_base + offs, delta, mask=offs < T)
    tl.debug_barrier()
    tl.atomic_xchg(flag_ptr + bh * nblk + j, 1, sem="release")

    # dQ of those queries: every earlier key, then the diagonal ones (masked)
    q = tl.load(base + rows, mask=rmask, other=0.0)
    lse = tl.load(lse_base + offs, mask=offs < T, other=float("inf"))
    dq = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    dq = _dq_steps(dq, q, dy, lse, delta, offs, base + C, 0, start, T, qk_scale, C, HS, BLOCK_N2, BLOCK_D,
                   PRECISION, False)
    dq = _dq_steps(dq, q, dy, lse, delta, offs, base + C, start, end, T, qk_scale, C, HS, BLOCK_N2, BLOCK_D,
                   PRECISION, True)
    tl.store(dbase + rows, (dq * sm_scale).to(dqkv_ptr.dtype.element_ty), mask=rmask)

    # the deltas of every later query block: published (flags read with acquire), or computed here
    for first in range(j + 1, nblk, 32):
        later = first + tl.arange(0, 32)
        fmask = later < nblk
        flags = tl.atomic_add(flag_ptr + bh * nblk + later, 0, mask=fmask, sem="acquire")
        if tl.min(tl.where(fmask, flags, 1), axis=0) == 0:
            for jj in range(first, tl.minimum(first + 32, nblk)):
                rows_jj = jj * BLOCK + tl.arange(0, BLOCK)
                delta_jj, _ = _delta_rows(y_ptr, res_ptr, dy_ptr, out_base, rows_jj, offs_d, T, C, HS, HAS_RES)
                tl.store(delta_base + rows_jj, delta_jj, mask=rows_jj < T)
    tl.debug_barrier()

    # dK, dV of keys start..start+BLOCK: the diagonal queries (masked), then every later one
    k = tl.load(base + C + rows, mask=rmask, other=0.0)
    v = tl.load(base + 2 * C + rows, mask=rmask, other=0.0)
    dk = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK, BLOCK_D), dtype=tl.float32)
    dk, dv = _dkdv_steps(dk, dv, k, v, offs, base, dy_ptr + out_base, lse_base, delta_base, start, end, T, qk_scale,
                         C, HS, BLOCK_M1, BLOCK_D, PRECISION, True)
    dk, dv = _dkdv_steps(dk, dv, k, v, offs, base, dy_ptr + out_base, lse_base, delta_base, start + BLOCK, T, T,
                         qk_scale, C, HS, BLOCK_M1, BLOCK_D, PRECISION, False)
    tl.store(dbase + C + rows, (dk * sm_scale).to(dqkv_ptr.dtype.element_ty), mask=rmask)
    tl.store(dbase + 2 * C + rows, dv.to(dqkv_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _wait_at_least(count_ptr, target, SPIN_ASM: tl.constexpr):
    """Spin until the int32 at count_ptr is >= target, with acquire semantics: whatever its writers
    did before they released their increments is then visible here. Compiled, every thread spins on
    its own acquire load in inline PTX (a `while` here would be a nested loop, which keeps Triton's
    pipeliner off the loop around it); the interpreter polls an atomic."""
    if SPIN_ASM:
        tl.inline_asm_elementwise(
            "{ .reg .pred %p_wait; .reg .b32 %v_wait; SPIN: ld.acquire.gpu.global.b32 %v_wait, [$1]; "
            "setp.lt.s32 %p_wait, %v_wait, $2; @%p_wait bra SPIN; mov.b32 $0, 0; }",
            "=r,l,r", [count_ptr, target], dtype=tl.int32, is_pure=False, pack=1)
    else:
        while tl.atomic_add(count_ptr, 0, sem="acquire") < target:
            pass


@triton.jit
def _publish(count_ptr, SPIN_ASM: tl.constexpr):
    """Add one to the int32 at count_ptr once every thread of the program is done with its writes:
    a CTA barrier, then one thread's increment with release semantics (cumulative: it carries the
    other threads' writes, ordered before it by the barrier). Compiled, both are inline PTX (a
    tl.debug_barrier in the loop keeps Triton's pipeliner off it)."""
    if SPIN_ASM:
        tl.inline_asm_elementwise(
            "{ .reg .pred %p_first; .reg .b32 %t_id; mov.u32 %t_id, %tid.x; setp.eq.u32 %p_first, %t_id, 0; "
            "bar.sync 0; @%p_first red.release.gpu.global.add.s32 [$1], 1; mov.b32 $0, 0; }",
            "=r,l", [count_ptr], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.debug_barrier()
        tl.atomic_add(count_ptr, 1, sem="release")


@triton.jit
def _read_published(ptr):
    """Float32 values another program published, read by an atomic that never writes (compare-and-
    swap against a NaN no kernel stores): an atomic, unlike a load, is never prefetched by Triton's
    pipeliner to before the wait that makes the values valid. Every address must be in bounds."""
    never = tl.full(ptr.shape, 0x7FC0DEAD, tl.int32)
    bits = tl.atomic_cas(ptr.to(tl.pointer_type(tl.int32)), never, never, sem="relaxed")
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _ordered_steps(dk, dv, k, v, offs_n, j, q_base, dy_ptr, out_base, y_ptr, res_ptr, lse_ptr, delta_ptr,
                   count_ptr, dq_acc_ptr, dq_out_ptr, lo, hi, T, qk_scale, sm_scale, C: tl.constexpr,
                   HS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                   PRECISION: tl.constexpr, HAS_RES: tl.constexpr, FIRST: tl.constexpr, SPIN_ASM: tl.constexpr):
    """The ordered backward's walk (module docstring): dK, dV of key block j from the query blocks
    lo..hi, BLOCK_M a step, and each query block's share of dQ added in key-block order.
    FIRST: the diagonal steps, where this key block is the query block's first adder (causal mask,
    delta computed and published here, the share stored); else the later key blocks must have added
    theirs first (waited for), and the share is added by float32 atomics in that order. Key block 0
    is the last adder of every query block: it writes dQ itself (scaled, in the input dtype)."""
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        mmask = offs_m < T
        qmask = mmask[:, None] & dmask[None, :]
        qt = tl.load(q_base + offs_m[None, :] * (3 * C) + offs_d[:, None], mask=dmask[:, None] & mmask[None, :],
                     other=0.0)                                                  # (BLOCK_D, BLOCK_M) Q^T
        lse = tl.load(lse_ptr + offs_m, mask=mmask, other=float("inf"))
        count = count_ptr + start_m // BLOCK_M
        if FIRST:  # delta of these queries, published with the share below
            delta, dy = _delta_rows(y_ptr, res_ptr, dy_ptr, out_base, offs_m, offs_d, T, C, HS, HAS_RES)
            tl.store(delta_ptr + offs_m, delta, mask=mmask)
        else:
            dy = tl.load(dy_ptr + out_base + offs_m[:, None] * C + offs_d[None, :], mask=qmask, other=0.0)
        pt, dv, dpt = _scores_dv_dp(k, v, qt, dy, lse, dv, offs_m, offs_n, qk_scale, PRECISION, FIRST)
        if not FIRST:  # every later key block of these queries has added its share (so delta is published)
            _wait_at_least(count, start_m // BLOCK_N - j, SPIN_ASM)
            delta = tl.where(mmask, _read_published(delta_ptr + offs_m), 0.0)   # rows past T: never stored
        dst = (pt * (dpt - delta[None, :])).to(qt.dtype)
        dk = tl.dot(dst, tl.trans(qt), dk, input_precision=PRECISION)
        share = tl.dot(tl.trans(dst), k, input_precision=PRECISION)             # (BLOCK_M, BLOCK_D) dS K_j
        acc = dq_acc_ptr + offs_m[:, None] * HS + offs_d[None, :]
        out = dq_out_ptr + offs_m[:, None] * (3 * C) + offs_d[None, :]
        if FIRST:
            tl.store(acc, share, mask=qmask)
            if j == 0:
                tl.store(out, (share * sm_scale).to(dq_out_ptr.dtype.element_ty), mask=qmask)
        elif j == 0:  # the sum's last addition, rounded at the L2 as the other programs' are; then dQ
            total = tl.atomic_add(acc, share, mask=qmask, sem="relaxed") + share
            tl.store(out, (total * sm_scale).to(dq_out_ptr.dtype.element_ty), mask=qmask)
        else:
            tl.atomic_add(acc, share, mask=qmask, sem="relaxed")
        _publish(count, SPIN_ASM)
    return dk, dv


@kernel
def _attn_backward_ordered(qkv_ptr, y_ptr, res_ptr, dy_ptr, lse_ptr, delta_ptr, sync_ptr, dq_acc_ptr, dqkv_ptr, T,
                           qk_scale, sm_scale, C: tl.constexpr, NH: tl.constexpr, HS: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                           PRECISION: tl.constexpr, HAS_RES: tl.constexpr, SPIN_ASM: tl.constexpr):
    # grid (key blocks, B*NH); a ticket from the head's counter picks the key block, last first
    nkb = tl.num_programs(0)
    nqb = tl.cdiv(T, BLOCK_M)
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    sync = sync_ptr + bh * (nqb + 1)             # the head's ticket counter, then a count per query block
    j = nkb - 1 - tl.atomic_add(sync, 1, sem="relaxed")
    start = j * BLOCK_N
    base = qkv_ptr + b.to(tl.int64) * T * (3 * C) + h * HS
    dbase = dqkv_ptr + b.to(tl.int64) * T * (3 * C) + h * HS
    out_base = b.to(tl.int64) * T * C + h * HS  # of y, res and dy
    offs = start + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    rmask = (offs < T)[:, None] & (offs_d < HS)[None, :]
    rows = offs[:, None] * (3 * C) + offs_d[None, :]
    k = tl.load(base + C + rows, mask=rmask, other=0.0)
    v = tl.load(base + 2 * C + rows, mask=rmask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    lse_base = lse_ptr + bh.to(tl.int64) * T
    delta_base = delta_ptr + bh.to(tl.int64) * nqb * BLOCK_M   # whole query blocks a head (see backward_tiled)
    dq_acc = dq_acc_ptr + bh.to(tl.int64) * T * HS
    diagonal_end = tl.minimum(start + BLOCK_N, T)
    dk, dv = _ordered_steps(dk, dv, k, v, offs, j, base, dy_ptr, out_base, y_ptr, res_ptr, lse_base, delta_base,
                            sync + 1, dq_acc, dbase, start, diagonal_end, T, qk_scale, sm_scale, C, HS, BLOCK_N,
                            BLOCK_M, BLOCK_D, PRECISION, HAS_RES, True, SPIN_ASM)
    dk, dv = _ordered_steps(dk, dv, k, v, offs, j, base, dy_ptr, out_base, y_ptr, res_ptr, lse_base, delta_base,
                            sync + 1, dq_acc, dbase, diagonal_end, T, T, qk_scale, sm_scale, C, HS, BLOCK_N,
                            BLOCK_M, BLOCK_D, PRECISION, HAS_RES, False, SPIN_ASM)
    tl.store(dbase + C + rows, (dk * sm_scale).to(dqkv_ptr.dtype.element_ty), mask=rmask)
    tl.store(dbase + 2 * C + rows, dv.to(dqkv_ptr.dtype.element_ty), mask=rmask)


@dataclass(frozen=True)
class Tiles:
    """One launch configuration (every block a power of two; fwd_n divides fwd_m, bwd_m1 and bwd_n2
    divide bwd)."""
    fwd_m: int            # queries per forward program
    fwd_n: int            # keys per forward step
    fwd_warps: int
    fwd_stages: int
    bwd: int              # keys (dK, dV) and queries (dQ) per backward program
    bwd_m1: int           # queries per dK/dV step
    bwd_n2: int           # keys per dQ step
    bwd_warps: int
    bwd_stages: int
    bwd_dq: str = "walk"  # "walk": dQ by its own walk over the keys; "ordered": added in key-block order

    def __post_init__(self):  # the loops step from block edges: a step may not overrun its block
        if self.fwd_n > self.fwd_m or self.bwd_m1 > self.bwd or self.bwd_n2 > self.bwd:
            raise ValueError(f"attention tiles: steps larger than their blocks: {self}")
        if self.bwd_dq not in ("walk", "ordered"):
            raise ValueError(f"attention tiles: bwd_dq is 'walk' or 'ordered', got {self.bwd_dq!r}")


#: (dtype class, padded head size) -> tiles. "16bit": fp16/bf16 on the tensor cores. Heads up to
#: 64 take the H200's fastest at GPT-2's shape (reports/triton-h200/notes-attention.md: bf16,
#: T=1024, B=16 / 32): 64-row blocks everywhere, 4 warps; forward 0.0966 / 0.1855 ms against
#: 0.1025 / 0.1936 for the best 128-row block (128 x 64, 8 warps). 128-row backward blocks hold two
#: (128, 64) float32 accumulators, which spill at 4 warps (ptxas: 216 bytes of stack) and halve
#: occupancy at 8 (0.3320 ms at B=16 against 0.3127). The backward, with its dQ walk before its
#: dK/dV walk, takes 3 stages: 297.6 us at B=16 against 400.9 us with 2 ("Second pass"). Heads of
#: 128 keep tiles checked at HS=128 but not swept (3 backward stages, as for 64). "float32": IEEE
#: dots, small tiles for the registers; not swept.
TILES = {
    ("16bit", 16): Tiles(64, 64, 4, 3, 64, 64, 64, 4, 3),
    ("16bit", 32): Tiles(64, 64, 4, 3, 64, 64, 64, 4, 3),
    ("16bit", 64): Tiles(64, 64, 4, 3, 64, 64, 64, 4, 3),
    ("16bit", 128): Tiles(128, 64, 8, 3, 64, 32, 32, 4, 3),
    ("float32", 16): Tiles(64, 32, 4, 3, 64, 32, 32, 4, 2),
    ("float32", 32): Tiles(64, 32, 4, 3, 64, 32, 32, 4, 2),
    ("float32", 64): Tiles(64, 32, 4, 3, 64, 32, 32, 4, 2),
    ("float32", 128): Tiles(64, 32, 8, 3, 32, 16, 16, 4, 2),
}


#: the `ordered` variant's tiles: TILES' with dQ added in key-block order (bwd_n2 unused). Its walk
#: is one loop of five products a step where TILES' backward has two of four and three. At GPT-2's
#: shape (B=16/32/64) the 64 x 64, 4-warp tiles were its fastest of seven: 2 stages within 1% of 3,
#: 32-query steps 1.3x slower, 128-key blocks of 8 warps 1.1x (reports/triton-h200/notes-attention.md).
TILES_ORDERED = {key: replace(t, bwd_dq="ordered") for key, t in TILES.items()}


def tiles(dtype: str, T: int, HS: int, chosen: Tiles | None = None, table: dict = TILES) -> Tiles:
    """`table`'s entry for this dtype and head size (or `chosen`), shrunk for short sequences (T=1,
    tests), never below 16."""
    t = chosen or table[("float32" if dtype == "float32" else "16bit", max(16, next_pow2(HS)))]
    cap = max(16, next_pow2(T))
    return replace(t, fwd_m=min(t.fwd_m, cap), fwd_n=min(t.fwd_n, cap), bwd=min(t.bwd, cap),
                   bwd_m1=min(t.bwd_m1, cap), bwd_n2=min(t.bwd_n2, cap))


@dataclass
class Saved:
    qkv: object   # (B,T,3C) the input
    y: object     # (B,T,C) the output (the caller's array)
    res: object   # (B,T,C) o - y for fp16/bf16 (see the module docstring, Saved); None for float32
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
    return forward_tiled(None, inputs, attrs, out)


def backward(saved, dout, grads):
    return backward_tiled(None, saved, dout, grads)


class Ordered:
    """The `ordered` variant: the forward as flash's; the backward with dQ added in key-block order
    (module docstring, "Ordered backward"), at TILES_ORDERED."""

    forward = staticmethod(forward)

    @staticmethod
    def backward(saved, dout, grads):
        return backward_tiled(None, saved, dout, grads, table=TILES_ORDERED)


def forward_tiled(chosen: Tiles | None, inputs, attrs, out=None):
    """The op's forward at the launch configuration `chosen` (None: TILES'), shrunk as `tiles` does:
    the tile sweep (bench/tune/attention_tiles.py) runs its candidates through this."""
    qkv, n_head = inputs["qkv"], attrs["n_head"]
    dt, B, T, C, HS = _check(qkv, n_head)
    xp = xp_of(qkv)
    y = _common.output("attention", xp, out, (B, T, C), qkv.dtype)
    lse = xp.empty((B, n_head, T), dtype="float32")
    res = None if dt == "float32" else xp.empty((B, T, C), dtype=qkv.dtype)
    t = tiles(dt, T, HS, chosen)
    launch(_attn_forward, (cdiv(T, t.fwd_m), B * n_head), qkv, y, y if res is None else res, lse, T, LOG2E / math.sqrt(HS), C=C,
           NH=n_head, HS=HS, BLOCK_M=t.fwd_m, BLOCK_N=t.fwd_n, BLOCK_D=max(16, next_pow2(HS)),
           PRECISION=_common.dot_precision(dt), SAVE_RES=res is not None, num_warps=t.fwd_warps, num_stages=t.fwd_stages)
    return y, Saved(qkv, y, res, lse, n_head)


def backward_tiled(chosen: Tiles | None, saved, dout, grads, table: dict = TILES):
    """The op's backward at the launch configuration `chosen` (None: `table`'s), as forward_tiled."""
    qkv, n_head = saved.qkv, saved.n_head
    dt, B, T, C, HS = _check(qkv, n_head)
    _common.check_contiguous("attention", dout=dout)
    xp = xp_of(qkv)
    dqkv = _common.grad_buffer("attention", grads, "qkv", qkv, xp)
    t = tiles(dt, T, HS, chosen, table)
    sm_scale = 1.0 / math.sqrt(HS)
    res = saved.y if saved.res is None else saved.res
    shape = dict(C=C, NH=n_head, HS=HS, BLOCK_D=max(16, next_pow2(HS)), PRECISION=_common.dot_precision(dt),
                 HAS_RES=saved.res is not None, num_warps=t.bwd_warps, num_stages=t.bwd_stages)
    if t.bwd_dq == "ordered":
        nkb, nqb = cdiv(T, t.bwd), cdiv(T, t.bwd_m1)
        # delta: whole query blocks a head, as its atomic reads take every row of a block; sync: per
        # head a ticket counter and a count per query block, zeroed; the float32 dQ accumulator is
        # stored by each block's first adder before anyone reads it, so it needs no zeroing
        delta = xp.empty((B, n_head, nqb * t.bwd_m1), dtype="float32")
        sync = xp.zeros((B * n_head * (nqb + 1),), dtype="int32")
        dq_acc = xp.empty((B, n_head, T, HS), dtype="float32")
        launch(_attn_backward_ordered, (nkb, B * n_head), qkv, saved.y, res, dout, saved.lse, delta, sync, dq_acc,
               dqkv, T, sm_scale * LOG2E, sm_scale, BLOCK_N=t.bwd, BLOCK_M=t.bwd_m1, SPIN_ASM=compiled(xp), **shape)
        return {"qkv": dqkv}
    nblk = cdiv(T, t.bwd)
    # delta: a row of whole blocks per head, so no cache line holds a published block and one still
    # being written (a stale line in an SM's L1 would outlive the flag); flags: one per block, zeroed
    delta = xp.empty((B, n_head, nblk * t.bwd), dtype="float32")
    flags = xp.zeros((B * n_head * nblk,), dtype="int32")
    launch(_attn_backward, (nblk, B * n_head), qkv, saved.y, res, dout, saved.lse, delta, flags, dqkv, T,
           sm_scale * LOG2E, sm_scale, BLOCK=t.bwd, BLOCK_M1=t.bwd_m1, BLOCK_N2=t.bwd_n2, **shape)
    return {"qkv": dqkv}
