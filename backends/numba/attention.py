"""attention, numba: causal multi-head attention without the T x T matrix, heads in parallel.

Same math as backends/naive/attention.py (read that first): per batch b and head h,
S = q k^T / sqrt(HS) masked causally, P = softmax(S), y = P v. The naive version keeps
P (B,NH,T,T); these keep only the logsumexp of each row, lse (B,NH,T), and recompute P from it
in the backward. Work is split over the B*NH (batch, head) pairs, which are independent, so no two
threads ever write the same element. q, k, v are read in place from qkv (B,T,3C): head h's q of
row t is qkv[b, t, h*HS : (h+1)*HS], its k is C further, its v 2C further.

Variants
- `blas` (the default): FlashAttention's tiling with BLAS doing the tile products. Per (batch,
  head), queries go in blocks of BQ = 64; a block q0..q1-1 sees keys 0..q1-1 only (causality skips
  the rest), so its scores fit one (BQ, T) tile per thread, never T x T. Forward: the tile of
  scores S = scale q k^T is one GEMM, read straight out of qkv (leading dimension 3C); its exact
  softmax in numba (fexp, vectorised); y = P v one more GEMM, written straight into y. Backward:
  P recomputed from lse, and the five products as GEMMs, dk and dv accumulated by the GEMM itself
  (beta = 1). Heads are split over the cores, one single-threaded OpenBLAS call at a time per core
  (see _blas.py). Measured at the baby GPT's shapes (B=12, T=256, 6 heads of 64) on 2 cores: about
  2x the speed of `flash` in both directions; the GEMMs do the work that `flash`'s hand-written
  loops do, at BLAS's speed. Block sizes 32 and 128 were both slower than 64 there.
- `flash`: FlashAttention's online softmax on the CPU, all in numba's own loops. Queries go four at a time (a
  quad), keys in blocks of BK. Each head's keys are first copied transposed, KT (HS,T), so the
  quad's scores against a block are computed as axpys along contiguous keys:
      for d: S[i, :] += q_i[d] * KT[d, k0:k0+BK]        (i = the 4 queries)
  every loaded key feeds four FMAs and no dot product needs a horizontal sum (the dot-product
  form, one score at a time, ran at half the speed). Each row keeps a running max m, a running sum
  l and an unnormalised output acc; when a block raises the max to m', the old l and acc are
  scaled by exp(m - m') before the block's contributions are added. Memory: a 4 x BK tile and the
  transposed keys of one head per thread. Causality skips the key blocks past the quad and zeroes
  the part of the diagonal block past each row.
- `rows`: the simplest thing without a T x T matrix: one query row at a time, all its t+1 scores
  in a row buffer (T numbers per thread) as dot products (four keys a pass), an exact max, exp and
  sum, then y. Memory O(T) a thread.

Backward of `flash` and `rows` (the lse is all they save besides qkv and y):
    D[t] = sum_d dy[t, d] y[t, d]                     (= sum_s P[t, s] dP[t, s])
    for each quad of queries t, for each key block (keys s <= the quad's last query):
        S = q_t . k_s,  dP = dy_t . v_s               (two 4 x BK tiles, axpys over KT and VT)
        P = exp(S * scale - lse[t]),  dS = P (dP - D[t]) * scale,   0 where s > t
        dq_t += sum_s dS k_s;   dk_s += sum_t dS q_t;   dv_s += sum_t P dy_t
i.e. the naive backward's five products, tile by tile, with P recomputed instead of stored. dq of
the quad accumulates in a small local array; dk and dv rows get four queries' worth per pass.

float32 uses the vectorised _jit.fexp; sums accumulate in the input dtype. Any T (1, odd, not a
multiple of the tiles) and any head size are handled: tiles are clipped at T, and the rows of a
quad past T are read as row T-1 but get probability 0 and are never written.
"""

from dataclasses import dataclass

import numpy as np
from numba import get_num_threads, prange

from ._blas import NO_TRANS, TRANS, blocks, gemm, single_threaded_blas
from ._jit import contiguous, deliver, dest, exp_as, fexp, jit, pjit, scalar

BK = 64  # keys per block (flash forward and the backward); queries go four at a time


@dataclass
class Saved:
    qkv: np.ndarray  # (B,T,3C) the input (a reference)
    out: np.ndarray  # (B,T,C) the output y (a reference)
    lse: np.ndarray  # (B,NH,T) logsumexp of each query row's scaled scores, float64
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
        base = b * T
        qo, ko, vo = h * HS, C + h * HS, 2 * C + h * HS
        KT = np.empty((HS, T), q2.dtype)          # this head's keys, transposed: KT[d] is contiguous over keys
        for t in range(T):
            kr = q2[base + t, ko:ko + HS]
            for d in range(HS):
                KT[d, t] = kr[d]
        S = np.empty((4, BK), q2.dtype)            # (4,BK) the quad's scores, then probabilities
        acc = np.empty((4, HS), q2.dtype)          # (4,HS) unnormalised outputs
        m = np.empty(4, q2.dtype)                  # running max of each row
        l = np.empty(4, q2.dtype)                  # running sum of exp(s - max)
        corr = np.empty(4, q2.dtype)               # exp(old max - new max), per row
        for t0 in range(0, T, 4):
            nq = min(4, T - t0)
            r1, r2, r3 = base + min(t0 + 1, T - 1), base + min(t0 + 2, T - 1), base + min(t0 + 3, T - 1)
            qa, qb, qc, qd = q2[base + t0, qo:qo + HS], q2[r1, qo:qo + HS], q2[r2, qo:qo + HS], q2[r3, qo:qo + HS]
            for i in range(4):
                m[i] = -np.inf
                l[i] = zero
                for d in range(HS):
                    acc[i, d] = zero
            S0, S1, S2, S3 = S[0], S[1], S[2], S[3]
            last = t0 + nq                          # keys 0..last-1 are seen by some row of the quad
            for k0 in range(0, last, BK):
                nk = min(BK, last - k0)
                for j in range(nk):
                    S0[j] = zero
                    S1[j] = zero
                    S2[j] = zero
                    S3[j] = zero
                for d in range(HS):
                    kt = KT[d, k0:k0 + nk]
                    a0, a1, a2, a3 = qa[d], qb[d], qc[d], qd[d]
                    for j in range(nk):
                        kj = kt[j]
                        S0[j] += a0 * kj
                        S1[j] += a1 * kj
                        S2[j] += a2 * kj
                        S3[j] += a3 * kj
                for i in range(4):
                    Si = S[i]
                    t = t0 + i
                    n_ok = min(nk, t + 1 - k0)      # keys of the block row i may see (may be <= 0)
                    mx = m[i]
                    for j in range(max(n_ok, 0)):
                        Si[j] *= scale
                        mx = max(mx, Si[j])
                    c = fexp(m[i] - mx) if n_ok > 0 else zero + 1.0   # rescales what earlier blocks added
                    s = zero
                    for j in range(max(n_ok, 0)):
                        p = fexp(Si[j] - mx)
                        Si[j] = p
                        s += p
                    for j in range(max(n_ok, 0), nk):
                        Si[j] = zero
                    l[i] = l[i] * c + s
                    m[i] = mx
                    corr[i] = c
                A0, A1, A2, A3 = acc[0], acc[1], acc[2], acc[3]
                c0, c1, c2, c3 = corr[0], corr[1], corr[2], corr[3]
                for d in range(HS):
                    A0[d] *= c0
                    A1[d] *= c1
                    A2[d] *= c2
                    A3[d] *= c3
                for j in range(nk):
                    vr = q2[base + k0 + j, vo:vo + HS]
                    p0, p1, p2, p3 = S0[j], S1[j], S2[j], S3[j]
                    for d in range(HS):
                        v = vr[d]
                        A0[d] += p0 * v
                        A1[d] += p1 * v
                        A2[d] += p2 * v
                        A3[d] += p3 * v
            for i in range(nq):
                inv = 1.0 / l[i]
                orow = o2[base + t0 + i, qo:qo + HS]
                for d in range(HS):
                    orow[d] = acc[i, d] * inv
                lse[b, h, t0 + i] = m[i] + np.log(l[i])


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
    C = q2.shape[1] // 3
    HS = C // NH
    """Gradients by tiles of 4 queries x BK keys; heads in parallel, each owning its slices of dqkv."""
    for bh in prange(B * NH):
        b, h = bh // NH, bh % NH
        base = b * T
        qo, ko, vo = h * HS, C + h * HS, 2 * C + h * HS
        KT = np.empty((HS, T), q2.dtype)           # keys and values of this head, transposed
        VT = np.empty((HS, T), q2.dtype)
        D = np.empty(T, q2.dtype)                  # (T,) rowsum(dy * y) = rowsum(P * dP)
        for t in range(T):
            kr, vr = q2[base + t, ko:ko + HS], q2[base + t, vo:vo + HS]
            dyr, yr = do2[base + t, qo:qo + HS], o2[base + t, qo:qo + HS]
            for d in range(HS):
                KT[d, t] = kr[d]
                VT[d, t] = vr[d]
            s = zero
            for d in range(HS):                    # a sum in a loop of its own, with no stores: a loop that
                s += dyr[d] * yr[d]                # also stores may be vectorised or not depending on where
            D[t] = s                               # its arrays lie (runtime alias checks): not repeatable
            dq2[base + t, ko:ko + HS] = zero       # dk, dv accumulate over query quads: start at 0
            dq2[base + t, vo:vo + HS] = zero
        S = np.empty((4, BK), q2.dtype)            # scores -> probabilities P
        G = np.empty((4, BK), q2.dtype)            # dP -> dS (scaled)
        dq = np.empty((4, HS), q2.dtype)           # the quad's dq, summed over key blocks
        for t0 in range(0, T, 4):
            nq = min(4, T - t0)
            r1, r2, r3 = base + min(t0 + 1, T - 1), base + min(t0 + 2, T - 1), base + min(t0 + 3, T - 1)
            qa, qb, qc, qd = q2[base + t0, qo:qo + HS], q2[r1, qo:qo + HS], q2[r2, qo:qo + HS], q2[r3, qo:qo + HS]
            ya, yb, yc, yd = do2[base + t0, qo:qo + HS], do2[r1, qo:qo + HS], do2[r2, qo:qo + HS], do2[r3, qo:qo + HS]
            S0, S1, S2, S3 = S[0], S[1], S[2], S[3]
            G0, G1, G2, G3 = G[0], G[1], G[2], G[3]
            Q0, Q1, Q2, Q3 = dq[0], dq[1], dq[2], dq[3]
            for d in range(HS):
                Q0[d] = zero
                Q1[d] = zero
                Q2[d] = zero
                Q3[d] = zero
            last = t0 + nq
            for k0 in range(0, last, BK):
                nk = min(BK, last - k0)
                for j in range(nk):
                    S0[j] = zero
                    S1[j] = zero
                    S2[j] = zero
                    S3[j] = zero
                    G0[j] = zero
                    G1[j] = zero
                    G2[j] = zero
                    G3[j] = zero
                for d in range(HS):                # S = Q K^T and dP = dY V^T, the quad against the block
                    kt, vt = KT[d, k0:k0 + nk], VT[d, k0:k0 + nk]
                    a0, a1, a2, a3 = qa[d], qb[d], qc[d], qd[d]
                    g0, g1, g2, g3 = ya[d], yb[d], yc[d], yd[d]
                    for j in range(nk):
                        kj, vj = kt[j], vt[j]
                        S0[j] += a0 * kj
                        S1[j] += a1 * kj
                        S2[j] += a2 * kj
                        S3[j] += a3 * kj
                        G0[j] += g0 * vj
                        G1[j] += g1 * vj
                        G2[j] += g2 * vj
                        G3[j] += g3 * vj
                for i in range(4):                 # P = exp(S scale - lse), dS = P (dP - D) scale; 0 where masked
                    t = t0 + i
                    Si, Gi = S[i], G[i]
                    n_ok = min(nk, t + 1 - k0) if i < nq else 0
                    if n_ok > 0:
                        lt, Dt = lse[b, h, t], D[t]
                        for j in range(n_ok):
                            p = exp_as(Si[j] * scale - lt, zero)   # difference in float64 (lse is)
                            Si[j] = p
                            Gi[j] = p * (Gi[j] - Dt) * scale
                    for j in range(max(n_ok, 0), nk):
                        Si[j] = zero
                        Gi[j] = zero
                for j in range(nk):                # dq += dS K;  dk += dS^T Q;  dv += P^T dY
                    kr = q2[base + k0 + j, ko:ko + HS]
                    dkr = dq2[base + k0 + j, ko:ko + HS]
                    dvr = dq2[base + k0 + j, vo:vo + HS]
                    s0, s1, s2, s3 = G0[j], G1[j], G2[j], G3[j]
                    p0, p1, p2, p3 = S0[j], S1[j], S2[j], S3[j]
                    for d in range(HS):
                        kd = kr[d]
                        Q0[d] += s0 * kd
                        Q1[d] += s1 * kd
                        Q2[d] += s2 * kd
                        Q3[d] += s3 * kd
                        dkr[d] += s0 * qa[d] + s1 * qb[d] + s2 * qc[d] + s3 * qd[d]
                        dvr[d] += p0 * ya[d] + p1 * yb[d] + p2 * yc[d] + p3 * yd[d]
            for i in range(nq):
                dqr = dq2[base + t0 + i, qo:qo + HS]
                for d in range(HS):
                    dqr[d] = dq[i, d]


def _forward(kernel, inputs, attrs, out):
    qkv = contiguous(inputs["qkv"])                        # (B,T,3C)
    NH = attrs["n_head"]
    B, T, C3 = qkv.shape
    C = C3 // 3
    y = dest(out, (B, T, C), qkv.dtype)                    # (B,T,C)
    lse = np.empty((B, NH, T), np.float64)                 # (B,NH,T), float64: see _backward
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


# ---- blas: BLAS for the tile products, numba for the softmax ----------------------------------------
BQ = 64  # query rows per block (blas)


@jit
def _softmax_rows(S, nq, nk, q0, lse_row):
    """S[:nq, :nk] holds scaled scores of queries q0.. against keys 0..nk-1 -> causal probabilities
    in place (0 past the diagonal); lse_row[q0 + i] = logsumexp of row i's unmasked scores."""
    zero = S[0, 0] * 0
    for i in range(nq):
        row = S[i]
        n_ok = min(nk, q0 + i + 1)
        mx = row[0]
        for j in range(n_ok):
            mx = max(mx, row[j])
        total = zero
        for j in range(n_ok):
            p = fexp(row[j] - mx)
            row[j] = p
            total += p
        inv = 1 / total
        for j in range(n_ok):
            row[j] *= inv
        for j in range(n_ok, nk):
            row[j] = zero
        lse_row[q0 + i] = mx + np.log(total)


@jit
def _dsoftmax_rows(S, G, nq, nk, q0, lse_h, D, scale):
    """S = scaled scores -> P = exp(S - lse), G = dP -> dS = P (dP - D) scale (the scores' scale
    folded in); both 0 past the diagonal. lse_h and D are this head's rows, in S's dtype."""
    zero = S[0, 0] * 0
    for i in range(nq):
        t = q0 + i
        srow, grow = S[i], G[i]
        n_ok = min(nk, t + 1)
        lt, dt = lse_h[t], D[t]
        for j in range(n_ok):
            p = fexp(srow[j] - lt)
            srow[j] = p
            grow[j] = p * (grow[j] - dt) * scale
        for j in range(n_ok, nk):
            srow[j] = zero
            grow[j] = zero


@pjit
def _forward_blas(qkv, B, T, NH, scale, y, lse, threads):
    """Per (batch, head), per block of BQ queries q0..q1-1 (they see keys 0..q1-1):
        S = scale q k^T  (GEMM, straight from qkv: leading dimension 3C),  P = softmax(S) in place,
        y[rows] = P v    (GEMM, straight into y: leading dimension C).
    Heads are split over `threads` parts; each part has its own (BQ,T) score tile."""
    C3 = qkv.shape[2]
    C = C3 // 3
    HS = C // NH
    heads = B * NH
    parts, step = blocks(heads, threads)
    for part in prange(parts):
        single_threaded_blas()
        S = np.empty((BQ, T), qkv.dtype)
        for bh in range(part * step, min(heads, part * step + step)):
            b, h = bh // NH, bh % NH
            q_at = b * T * C3 + h * HS                    # element offset of q[b, 0, head h]
            for q0 in range(0, T, BQ):
                q1 = min(T, q0 + BQ)
                nq = q1 - q0
                gemm(NO_TRANS, TRANS, nq, q1, HS, scale, qkv, q_at + q0 * C3, C3, qkv, q_at + C, C3,
                     0.0, S, 0, T)
                _softmax_rows(S, nq, q1, q0, lse[b, h])
                gemm(NO_TRANS, NO_TRANS, nq, HS, q1, 1.0, S, 0, T, qkv, q_at + 2 * C, C3,
                     0.0, y, (b * T + q0) * C + h * HS, C)


@pjit
def _backward_blas(qkv, y, dy, lse, B, T, NH, scale, dqkv, threads):
    """Per (batch, head): D = rowsum(dy * y); then per block of queries, P recomputed from lse:
        S = scale q k^T,  G = dy v^T  ->  P, dS = P (G - D) scale     (_dsoftmax_rows)
        dq[rows] = dS k,  dk[:q1] += dS^T q[rows],  dv[:q1] += P^T dy[rows]
    (the last two accumulate in place: GEMMs with beta = 1 into dqkv, zeroed first)."""
    C3 = qkv.shape[2]
    C = C3 // 3
    HS = C // NH
    heads = B * NH
    parts, step = blocks(heads, threads)
    for part in prange(parts):
        single_threaded_blas()
        S = np.empty((BQ, T), qkv.dtype)
        G = np.empty((BQ, T), qkv.dtype)
        D = np.empty(T, qkv.dtype)
        lse_h = np.empty(T, qkv.dtype)
        for bh in range(part * step, min(heads, part * step + step)):
            b, h = bh // NH, bh % NH
            q_at = b * T * C3 + h * HS
            y_at = b * T * C + h * HS
            for t in range(T):
                dyr, yr = dy[b, t, h * HS:(h + 1) * HS], y[b, t, h * HS:(h + 1) * HS]
                acc = yr[0] * 0
                for d in range(HS):
                    acc += dyr[d] * yr[d]
                D[t] = acc
                lse_h[t] = lse[b, h, t]
                dqkv[b, t, C + h * HS:C + (h + 1) * HS] = 0
                dqkv[b, t, 2 * C + h * HS:2 * C + (h + 1) * HS] = 0
            for q0 in range(0, T, BQ):
                q1 = min(T, q0 + BQ)
                nq = q1 - q0
                gemm(NO_TRANS, TRANS, nq, q1, HS, scale, qkv, q_at + q0 * C3, C3, qkv, q_at + C, C3,
                     0.0, S, 0, T)
                gemm(NO_TRANS, TRANS, nq, q1, HS, 1.0, dy, y_at + q0 * C, C, qkv, q_at + 2 * C, C3,
                     0.0, G, 0, T)
                _dsoftmax_rows(S, G, nq, q1, q0, lse_h, D, scale)
                gemm(NO_TRANS, NO_TRANS, nq, HS, q1, 1.0, G, 0, T, qkv, q_at + C, C3,
                     0.0, dqkv, q_at + q0 * C3, C3)
                gemm(TRANS, NO_TRANS, q1, HS, nq, 1.0, G, 0, T, qkv, q_at + q0 * C3, C3,
                     1.0, dqkv, q_at + C, C3)
                gemm(TRANS, NO_TRANS, q1, HS, nq, 1.0, S, 0, T, dy, y_at + q0 * C, C,
                     1.0, dqkv, q_at + 2 * C, C3)


class Blas:
    """Blocks of BQ queries against all the keys they see, the products through BLAS from numba."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        qkv = contiguous(inputs["qkv"])                    # (B,T,3C)
        NH = attrs["n_head"]
        B, T, C3 = qkv.shape
        y = dest(out, (B, T, C3 // 3), qkv.dtype)
        lse = np.empty((B, NH, T), np.float64)
        _forward_blas(qkv, B, T, NH, scalar(1.0 / np.sqrt(C3 // 3 // NH), qkv.dtype), y, lse, get_num_threads())
        y = deliver(y, out)
        return y, Saved(qkv, y, lse, NH)

    @staticmethod
    def backward(saved, dout, grads):
        qkv, NH = saved.qkv, saved.n_head
        B, T, C3 = qkv.shape
        dqkv = dest(grads.get("qkv"), qkv.shape, qkv.dtype)  # (B,T,3C) overwritten
        _backward_blas(qkv, contiguous(saved.out), contiguous(dout), saved.lse, B, T, NH,
                       scalar(1.0 / np.sqrt(C3 // 3 // NH), qkv.dtype), dqkv, get_num_threads())
        return {"qkv": deliver(dqkv, grads.get("qkv"))}
