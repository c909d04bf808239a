"""attention_cached, triton: split-K "flash-decoding" of Tn new queries over a KV cache.

Same math as backends/naive/attention_cached.py: in row b (L = lengths[b], or Tk) query i sits at
position t0 + i (t0 = L - Tn) and sees keys 0..t0+i; nothing at or past L is read.

Why split the keys. A decoding step has one query per row: B * NH (query block, head) pairs, 12 at
batch 1 for GPT-2, on a card with 132 SMs. FlashAttention's one program per query block would
leave 120 SMs idle while 12 walk the whole cache. Flash-decoding (Dao et al., 2023) cuts the keys
into S splits as well: grid (S, B*NH, query blocks), each program an online softmax over its
split's keys only, writing an unnormalised partial: its output o_s = sum_j p_j v_j / l_s and the
base-2 log-sum-exp lse_s = m_s + log2(l_s) of its scaled scores. A second kernel merges the S
partials of every (row, head, query) exactly:

    M = max_s lse_s,   w_s = 2^(lse_s - M),   out = sum_s w_s o_s / sum_s w_s

(a split with no visible key has lse_s = -inf and weight 0; split 0 always sees key 0). S is
chosen so that the grid has about two programs per SM, and only from shapes (Tk is the cache's
capacity, never the lengths), so a CUDA graph captured once replays for any lengths: splits past a
row's length exit at once. With one split the partial kernel writes the output itself (no merge).

The scores are kept in base 2 (exp2, the scale times log2(e) folded into one multiply), as in the
`attention` flash kernel. q may be a strided view (the q columns of qkv (B,Tn,3C)): its batch and
row strides are arguments, so no copy is made; k and v are the caches (B,Tk,C), contiguous.
float32 uses IEEE float32 dots (the contract's precision); fp16 and bf16 the tensor cores with
float32 accumulation, P rounded to the input dtype before P @ V. Head sizes up to 128. The query
block is at least 16 rows (tl.dot's minimum): a decoding step pads its one query, which costs
nothing measurable in a kernel bound by reading the cache.
"""

import math

from . import _common
from ._runtime import cdiv, kernel, launch, next_pow2, tl, xp_of

MAX_HS = 128
LOG2E = 1.4426950408889634
#: Launch configuration (chosen from the arithmetic above, not swept): keys per inner step, programs
#: per SM the split count aims at, the largest query block
BLOCK_N = 64
PROGRAMS_PER_SM = 2
MAX_BLOCK_M = 64


@kernel
def _decode_partial(q_ptr, k_ptr, v_ptr, len_ptr, o_ptr, lse_ptr, out_ptr, q_sb, q_st, Tn, Tk, chunk, qk_scale,
                    C: tl.constexpr, NH: tl.constexpr, HS: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PRECISION: tl.constexpr,
                    HAS_LENGTHS: tl.constexpr, DIRECT: tl.constexpr):
    split = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // NH
    h = bh % NH
    if HAS_LENGTHS:
        L = tl.load(len_ptr + b)
    else:
        L = Tk
    t0 = L - Tn
    offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)   # query indices in 0..Tn
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HS
    mmask = offs_m < Tn
    q = tl.load(q_ptr + b.to(tl.int64) * q_sb + offs_m[:, None] * q_st + h * HS + offs_d[None, :],
                mask=mmask[:, None] & dmask[None, :], other=0.0)
    # this split's keys, cut at the row's length and at the last visible key of this query block
    lo = split * chunk
    hi = tl.minimum(tl.minimum(lo + chunk, L), t0 + tl.minimum(Tn, tl.program_id(2) * BLOCK_M + BLOCK_M))
    kv_base = b.to(tl.int64) * Tk * C + h * HS
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs_n
        cmask = cols < hi
        at = kv_base + cols[:, None] * C + offs_d[None, :]
        k = tl.load(k_ptr + at, mask=cmask[:, None] & dmask[None, :], other=0.0)
        v = tl.load(v_ptr + at, mask=cmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale          # (BLOCK_M, BLOCK_N)
        s = tl.where(cmask[None, :] & (cols[None, :] <= t0 + offs_m[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)                      # rows with nothing yet
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    omask = mmask[:, None] & dmask[None, :]
    if DIRECT:   # one split: this is the output
        at = b.to(tl.int64) * Tn * C + offs_m[:, None] * C + h * HS + offs_d[None, :]
        tl.store(out_ptr + at, o.to(out_ptr.dtype.element_ty), mask=omask)
    else:
        row = (split * tl.num_programs(1) + bh).to(tl.int64) * Tn + offs_m          # (split, b*NH + h, i)
        tl.store(o_ptr + row[:, None] * HS + offs_d[None, :], o, mask=omask)
        tl.store(lse_ptr + row, tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf")),
                 mask=mmask)


@kernel
def _decode_merge(o_ptr, lse_ptr, out_ptr, BH, Tn, S, C: tl.constexpr, NH: tl.constexpr, HS: tl.constexpr,
                  BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    # one program per (row b, head h, query i): the S partials of that query, merged in split order
    pid = tl.program_id(0)
    i = pid % Tn
    bh = pid // Tn
    b = bh // NH
    h = bh % NH
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    smask = offs_s < S
    rows = (offs_s * BH + bh).to(tl.int64) * Tn + i
    lse = tl.load(lse_ptr + rows, mask=smask, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, axis=0))                                          # (BLOCK_S,)
    o = tl.load(o_ptr + rows[:, None] * HS + offs_d[None, :], mask=smask[:, None] & (offs_d < HS)[None, :],
                other=0.0)
    y = tl.sum(o * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + (b.to(tl.int64) * Tn + i) * C + h * HS + offs_d, y.to(out_ptr.dtype.element_ty),
             mask=offs_d < HS)


def splits_for(B: int, NH: int, Tk: int, query_blocks: int, sms: int) -> tuple[int, int]:
    """(S, chunk): the keys cut into S splits of `chunk` keys (a multiple of BLOCK_N), about
    PROGRAMS_PER_SM programs per SM in all. From shapes only (graph capture, see the docstring)."""
    want = max(1, cdiv(PROGRAMS_PER_SM * sms, B * NH * query_blocks))
    splits = min(want, cdiv(Tk, BLOCK_N))
    chunk = cdiv(cdiv(Tk, splits), BLOCK_N) * BLOCK_N
    return cdiv(Tk, chunk), chunk


def forward(inputs, attrs, out=None):
    q, k, v, lengths = inputs["q"], inputs["k"], inputs["v"], inputs.get("lengths")
    n_head = attrs["n_head"]
    dt = _common.check_float("attention_cached", "q", q)
    for name, a in (("k", k), ("v", v)):
        if str(a.dtype) != dt:
            raise TypeError(f"attention_cached: '{name}' must have q's dtype {dt}, got {a.dtype}")
    _common.check_contiguous("attention_cached", k=k, v=v)
    B, Tn, C = q.shape
    Tk = k.shape[1]
    HS = C // n_head
    if HS > MAX_HS:
        raise ValueError(f"attention_cached: the triton variant takes head sizes up to {MAX_HS}, got HS={HS} "
                         f"(C={C}, n_head={n_head})")
    xp = xp_of(q)
    if q.strides[2] != q.itemsize:
        q = xp.ascontiguousarray(q)
    y = _common.output("attention_cached", xp, out, (B, Tn, C), q.dtype)
    if lengths is not None and str(lengths.dtype) != "int32":
        lengths = lengths.astype("int32")
    block_m = min(MAX_BLOCK_M, max(16, next_pow2(Tn)))
    query_blocks = cdiv(Tn, block_m)
    splits, chunk = splits_for(B, n_head, Tk, query_blocks, _common.num_sms(xp))
    direct = splits == 1
    o_part = y if direct else xp.empty((splits, B * n_head, Tn, HS), dtype="float32")
    lse_part = y if direct else xp.empty((splits, B * n_head, Tn), dtype="float32")
    block_d = max(16, next_pow2(HS))
    launch(_decode_partial, (splits, B * n_head, query_blocks), q, k, v, y if lengths is None else lengths,
           o_part, lse_part, y, q.strides[0] // q.itemsize, q.strides[1] // q.itemsize, Tn, Tk, chunk,
           LOG2E / math.sqrt(HS), C=C, NH=n_head, HS=HS, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d,
           PRECISION=_common.dot_precision(dt), HAS_LENGTHS=lengths is not None, DIRECT=direct, num_warps=4,
           num_stages=2)
    if not direct:
        launch(_decode_merge, (B * n_head * Tn,), o_part, lse_part, y, B * n_head, Tn, splits, C=C, NH=n_head,
               HS=HS, BLOCK_S=max(2, next_pow2(splits)), BLOCK_D=block_d, num_warps=1)
    return y, None


def backward(saved, dout, grads):
    return {}  # no differentiable inputs
