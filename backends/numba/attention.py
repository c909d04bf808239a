"""attention, numba: causal multi-head attention without the T x T matrix, heads in parallel.

Same math as backends/naive/attention.py (read that first): per batch b and head h,
S = q k^T / sqrt(HS) masked causally, P = softmax(S), y = P v. The naive version keeps
P (B,NH,T,T); these keep only the logsumexp of each row, lse (B,NH,T), and recompute P from it
in the backward. Work is split over the B*NH (batch, head) pairs, which are independent, so no two
threads ever write the same element. q, k, v are read in place from qkv (B,T,3C): head h's q of
row t is qkv[b, t, h*HS : (h+1)*HS], its k is C further, its v 2C further.

Variants
- `flash` (the default): FlashAttention's online softmax on the CPU. Queries go in blocks of BQ
  rows, keys in blocks of BK; a key block (its k and v rows, BK*HS*2 numbers) is loaded into cache
  once for the BQ queries that use it. Each query row keeps a running max m, a running sum l and
  an unnormalised output acc; when a key block raises the max to m', the old sum and acc are scaled
  by exp(m - m') before the block's contributions are added. Memory: one BQ x BK tile per thread.
  Causality skips whole key blocks past the query block, and the part of the diagonal block past t.
- `rows`: the simplest thing without a T x T matrix: one query row at a time, all its t+1 scores
  in a row buffer (T numbers per thread), an exact max, exp and sum, then y. Memory O(T) a thread.

Backward (both variants; the lse is all they save besides qkv and y):
    D[t] = sum_d dy[t, d] y[t, d]                     (= sum_s P[t, s] dP[t, s])
    for each key block, for each query t >= its first key, for each key s <= t in the block:
        p = exp(q_t . k_s * scale - lse[t]);   dp = dy_t . v_s;   ds = p (dp - D[t]) * scale
        dv_s += p dy_t;   dq_t += ds k_s;   dk_s += ds q_t
i.e. the naive backward's five products, one (t, s) pair at a time, with the pair's P recomputed.
The (t, s) work for one key block keeps its dk and dv rows in cache.

float32 uses the vectorised _jit.fexp; dot products accumulate in the input dtype. Any T (1, odd,
not a multiple of the blocks) and any head size are handled: blocks are clipped at T.
"""

from dataclasses import dataclass

import numpy as np
from numba import prange

from ._jit import contiguous, deliver, dest, fexp, jit, pjit, scalar

BQ = 32  # query rows per block (flash)
BK = 32  # key rows per block (flash forward and the backward)


@dataclass
class Saved:
    qkv: np.ndarray  # (B,T,3C) the input (a reference)
    out: np.ndarray  # (B,T,C) the output y (a reference)
    lse: np.ndarray  # (B,NH,T) logsumexp of each query row's scaled scores
    n_head: int


@jit
def _scores(q2, qrow, qo, k2, krow, ko, nk, HS, scale, zero, srow):
    """srow[j] = scale * q . k_j: q is row qrow of q2 from column qo, the nk keys rows krow.. of k2
    from column ko (for `attention` both are qkv as (B*T,3C)).
    Four keys at a time: each element of q feeds four FMAs (1-D row views keep the loops
    vectorisable; indexing the 3-D array with computed offsets does not)."""
    qr = q2[qrow, qo:qo + HS]
    j = 0
    while j + 4 <= nk:
        k0 = k2[krow + j, ko:ko + HS]
        k1 = k2[krow + j + 1, ko:ko + HS]
        kk2 = k2[krow + j + 2, ko:ko + HS]
        k3 = k2[krow + j + 3, ko:ko + HS]
        s0 = s1 = s2 = s3 = zero
        for d in range(HS):
            qd = qr[d]
            s0 += qd * k0[d]
            s1 += qd * k1[d]
            s2 += qd * kk2[d]
            s3 += qd * k3[d]
        srow[j] = s0 * scale
        srow[j + 1] = s1 * scale
        srow[j + 2] = s2 * scale
        srow[j + 3] = s3 * scale
        j += 4
    while j < nk:
        kr = k2[krow + j, ko:ko + HS]
        s = zero
        for d in range(HS):
            s += qr[d] * kr[d]
        srow[j] = s * scale
        j += 1


@jit
def _add_pv(q2, krow, vo, nk, HS, prow, acc):
    """acc += sum_j prow[j] * v_j over the nk value rows krow.., four rows a pass."""
    j = 0
    while j + 4 <= nk:
        v0 = q2[krow + j, vo:vo + HS]
        v1 = q2[krow + j + 1, vo:vo + HS]
        v2 = q2[krow + j + 2, vo:vo + HS]
        v3 = q2[krow + j + 3, vo:vo + HS]
        p0, p1, p2, p3 = prow[j], prow[j + 1], prow[j + 2], prow[j + 3]
        for d in range(HS):
            acc[d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d]
        j += 4
    while j < nk:
        vr = q2[krow + j, vo:vo + HS]
        p = prow[j]
        for d in range(HS):
            acc[d] += p * vr[d]
        j += 1


@pjit
def _flash_forward(q2, B, T, NH, scale, zero, o2, lse):
    C = q2.shape[1] // 3
    HS = C // NH
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        base = b * T                               # row of (b, t=0) in q2 (B*T,3C) and o2 (B*T,C)
        qo, ko, vo = h * HS, C + h * HS, 2 * C + h * HS
        S = np.empty((BQ, BK), q2.dtype)           # (BQ,BK) scores, then probabilities
        acc = np.empty((BQ, HS), q2.dtype)         # (BQ,HS) unnormalised outputs
        mrow = np.empty(BQ, q2.dtype)              # (BQ,) running max
        lrow = np.empty(BQ, q2.dtype)              # (BQ,) running sum of exp(s - max)
        for q0 in range(0, T, BQ):
            nq = min(T, q0 + BQ) - q0
            for i in range(nq):
                mrow[i] = -np.inf
                lrow[i] = zero
                for d in range(HS):
                    acc[i, d] = zero
            for k0 in range(0, q0 + nq, BK):       # key blocks up to the block's last query
                for i in range(nq):
                    t = q0 + i
                    nk = min(k0 + BK, t + 1) - k0   # keys of this block that row t may see
                    if nk <= 0:
                        continue
                    srow = S[i]
                    _scores(q2, base + t, qo, q2, base + k0, ko, nk, HS, scale, zero, srow)
                    mx = mrow[i]
                    for j in range(nk):
                        mx = max(mx, srow[j])
                    corr = fexp(mrow[i] - mx)       # rescales what earlier blocks added (0 at first)
                    l = zero
                    for j in range(nk):
                        p = fexp(srow[j] - mx)
                        srow[j] = p
                        l += p
                    lrow[i] = lrow[i] * corr + l
                    mrow[i] = mx
                    accr = acc[i]
                    for d in range(HS):
                        accr[d] *= corr
                    _add_pv(q2, base + k0, vo, nk, HS, srow, accr)
            for i in range(nq):
                inv = 1.0 / lrow[i]
                orow = o2[base + q0 + i, qo:qo + HS]
                for d in range(HS):
                    orow[d] = acc[i, d] * inv
                lse[b, h, q0 + i] = mrow[i] + np.log(lrow[i])


@pjit
def _rows_forward(q2, B, T, NH, scale, zero, o2, lse):
    C = q2.shape[1] // 3
    HS = C // NH
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        base = b * T
        qo, ko, vo = h * HS, C + h * HS, 2 * C + h * HS
        row = np.empty(T, q2.dtype)                # (T,) one query's scores, then probabilities
        acc = np.empty(HS, q2.dtype)               # (HS,)
        for t in range(T):
            _scores(q2, base + t, qo, q2, base, ko, t + 1, HS, scale, zero, row)
            mx = row[0]
            for j in range(1, t + 1):
                mx = max(mx, row[j])
            l = zero
            for j in range(t + 1):
                p = fexp(row[j] - mx)
                row[j] = p
                l += p
            for d in range(HS):
                acc[d] = zero
            _add_pv(q2, base, vo, t + 1, HS, row, acc)
            inv = 1.0 / l
            orow = o2[base + t, qo:qo + HS]
            for d in range(HS):
                orow[d] = acc[d] * inv
            lse[b, h, t] = mx + np.log(l)


@pjit
def _backward(q2, o2, lse, do2, B, T, NH, scale, zero, dq2):
    """Gradients by 4 x 4 tiles of (query, key) pairs; heads in parallel, each owning its slices."""
    C = q2.shape[1] // 3
    HS = C // NH
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        base = b * T
        qo, ko, vo = h * HS, C + h * HS, 2 * C + h * HS
        D = np.empty(T, q2.dtype)                  # (T,) rowsum(dy * y) = rowsum(P * dP)
        for t in range(T):
            dyr = do2[base + t, qo:qo + HS]
            yr = o2[base + t, qo:qo + HS]
            s = zero
            for d in range(HS):
                s += dyr[d] * yr[d]
            D[t] = s
            dq2[base + t, qo:qo + HS] = zero       # this head's slices of dqkv: overwritten
            dq2[base + t, ko:ko + HS] = zero
            dq2[base + t, vo:vo + HS] = zero
        P = np.empty((4, 4), q2.dtype)             # (4 queries, 4 keys) probabilities
        dS = np.empty((4, 4), q2.dtype)            # and score gradients (scaled)
        for k0 in range(0, T, 4):
            nk = min(4, T - k0)
            # rows past T are read as row k0 (their P and dS are 0) but never written
            r1, r2, r3 = base + min(k0 + 1, T - 1), base + min(k0 + 2, T - 1), base + min(k0 + 3, T - 1)
            ka, kb, kc, kd = q2[base + k0, ko:ko + HS], q2[r1, ko:ko + HS], q2[r2, ko:ko + HS], q2[r3, ko:ko + HS]
            va, vb, vc, vd = q2[base + k0, vo:vo + HS], q2[r1, vo:vo + HS], q2[r2, vo:vo + HS], q2[r3, vo:vo + HS]
            for t0 in range(k0, T, 4):             # query quads that see at least key k0
                nq = min(4, T - t0)
                for i in range(4):
                    t = min(t0 + i, T - 1)
                    qr = q2[base + t, qo:qo + HS]
                    dyr = do2[base + t, qo:qo + HS]
                    s0 = s1 = s2 = s3 = zero
                    g0 = g1 = g2 = g3 = zero
                    for d in range(HS):
                        qd = qr[d]
                        gd = dyr[d]
                        s0 += qd * ka[d]
                        s1 += qd * kb[d]
                        s2 += qd * kc[d]
                        s3 += qd * kd[d]
                        g0 += gd * va[d]
                        g1 += gd * vb[d]
                        g2 += gd * vc[d]
                        g3 += gd * vd[d]
                    lt, Dt = lse[b, h, t], D[t]
                    for j, s, g in ((0, s0, g0), (1, s1, g1), (2, s2, g2), (3, s3, g3)):
                        if i < nq and j < nk and k0 + j <= t0 + i:
                            p = fexp(s * scale - lt)
                            P[i, j] = p
                            dS[i, j] = p * (g - Dt) * scale
                        else:
                            P[i, j] = zero
                            dS[i, j] = zero
                # dq_t += sum_j dS[t, j] k_j
                for i in range(nq):
                    dqr = dq2[base + t0 + i, qo:qo + HS]
                    a0, a1, a2, a3 = dS[i, 0], dS[i, 1], dS[i, 2], dS[i, 3]
                    for d in range(HS):
                        dqr[d] += a0 * ka[d] + a1 * kb[d] + a2 * kc[d] + a3 * kd[d]
                # dk_j += sum_t dS[t, j] q_t;  dv_j += sum_t P[t, j] dy_t
                ra, rb, rc, rd = (base + t0, base + min(t0 + 1, T - 1), base + min(t0 + 2, T - 1),
                                  base + min(t0 + 3, T - 1))
                qa, qb, qc, qd_ = q2[ra, qo:qo + HS], q2[rb, qo:qo + HS], q2[rc, qo:qo + HS], q2[rd, qo:qo + HS]
                ya, yb, yc, yd = do2[ra, qo:qo + HS], do2[rb, qo:qo + HS], do2[rc, qo:qo + HS], do2[rd, qo:qo + HS]
                for j in range(nk):
                    dkr = dq2[base + k0 + j, ko:ko + HS]
                    dvr = dq2[base + k0 + j, vo:vo + HS]
                    a0, a1, a2, a3 = dS[0, j], dS[1, j], dS[2, j], dS[3, j]
                    p0, p1, p2, p3 = P[0, j], P[1, j], P[2, j], P[3, j]
                    for d in range(HS):
                        dkr[d] += a0 * qa[d] + a1 * qb[d] + a2 * qc[d] + a3 * qd_[d]
                        dvr[d] += p0 * ya[d] + p1 * yb[d] + p2 * yc[d] + p3 * yd[d]


def _forward(kernel, inputs, attrs, out):
    qkv = contiguous(inputs["qkv"])                        # (B,T,3C)
    NH = attrs["n_head"]
    B, T, C3 = qkv.shape
    C = C3 // 3
    y = dest(out, (B, T, C), qkv.dtype)                    # (B,T,C)
    lse = np.empty((B, NH, T), qkv.dtype)                  # (B,NH,T)
    kernel(qkv.reshape(B * T, C3), B, T, NH, scalar(1.0 / np.sqrt(C // NH), qkv.dtype),
           scalar(0.0, qkv.dtype), y.reshape(B * T, C), lse)
    y = deliver(y, out)
    return y, Saved(qkv, y, lse, NH)


def backward(saved, dout, grads):
    qkv = saved.qkv
    dqkv = dest(grads.get("qkv"), qkv.shape, qkv.dtype)    # (B,T,3C) overwritten
    dt = qkv.dtype
    B, T, C3 = qkv.shape
    C = C3 // 3
    _backward(qkv.reshape(B * T, C3), contiguous(saved.out).reshape(B * T, C), saved.lse,
              contiguous(dout).reshape(B * T, C), B, T, saved.n_head,
              scalar(1.0 / np.sqrt(C // saved.n_head), dt), scalar(0.0, dt), dqkv.reshape(B * T, C3))
    return {"qkv": deliver(dqkv, grads.get("qkv"))}


class Flash:
    """Online softmax over key blocks; saves lse only."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        return _forward(_flash_forward, inputs, attrs, out)

    backward = staticmethod(backward)


class Rows:
    """One query row at a time with an exact softmax over a row buffer; saves lse only."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        return _forward(_rows_forward, inputs, attrs, out)

    backward = staticmethod(backward)
