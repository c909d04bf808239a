"""Layernorm (C = 768, bf16) kernel designs and launch configs on the H200: check, then time.

    python3 bench/tune/layernorm_sweep.py --out OUT.json            # on the GPU (round 2 of the sweep)
    python3 bench/tune/layernorm_sweep.py --check-cpu                 # interpreter, tiny shapes, fp32
    python3 bench/tune/layernorm_sweep.py --dry-run --out X.json      # the GPU run's steps, interpreted
    python3 bench/tune/layernorm_sweep.py --compile-only              # every candidate compiled for sm_90

Candidates are launch parameters of two sweep kernels. Forward (one block of ROWS rows per program):
the row as one padded power-of-two block ("pad", 1024 for 768) or split exactly (512 + 256,
"split"); statistics two-pass or in one round over x - x[row, 0] ("shift"); evict-first on the
loads ("ef") and on the stores ("sef"). Backward (G = per_sm x SMs programs, each walking row blocks
g, g + G, ... or a contiguous range, "contig"; loads pipelined num_stages = s): dweight/dbias summed
per block or kept per row ("accrows"); the partials finished by _reduce.finish_into, by a copy of it
launched as a programmatic dependent ("pdl<cols>x<rows>w<warps>"), or by the backward kernel itself
after all its programs arrive at a counter ("fused"; "coop": a cooperative launch).

Every candidate is first checked (random inputs, outputs poisoned with NaN, dweight/dbias pre-filled,
twice) against a float64 reference; then GPU-timed with euler_core.measure.timing (batches queued
behind its spin kernel, 4 rotating input sets, more than the L2). Beside them, in the same process:
the product's layernorm at its configuration and at neighbours of it (PRODUCT_FWD, PRODUCT_BWD), PyTorch's F.layer_norm (bf16) forward and backward, and kernels moving the
same bytes as an achievable bound: cudaMemcpy (cupy copyto) and a Triton copy for the forward, a
Triton c = a + b (2 reads, 1 write) for the backward. Round 1 (an earlier version of this file, in
git history) swept persistent forward grids, one-row-per-warp layouts and the finish's parameters.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np

T0 = time.time()
try:  # PyTorch only as an outside reference, imported before backends.triton
    import torch  # noqa: F401
except ImportError:
    torch = None

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from backends.triton import _common, _reduce, _runtime, layernorm  # noqa: E402
from backends.triton._runtime import cdiv, kernel, launch, tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents  # noqa: E402

C = 768
EPS = 1e-5


@kernel
def _fwd(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, C, eps,
         ROWS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, SHIFTED: tl.constexpr,
         EVICT: tl.constexpr, SEVICT: tl.constexpr):
    # columns [0, BLOCK_A) and, when BLOCK_B > 0, [BLOCK_A, BLOCK_A + BLOCK_B) (C = 768 = 512 + 256: no
    # padded lanes); SHIFTED: one reduction round over x - x[row, 0] (sum and sum of squares together)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < N
    base = rows.to(tl.int64) * C
    ca = tl.arange(0, BLOCK_A)
    ma = rmask[:, None] & (ca < C)[None, :]
    xa = tl.load(x_ptr + base[:, None] + ca[None, :], mask=ma, other=0.0, eviction_policy=EVICT).to(tl.float32)
    if BLOCK_B > 0:
        cb = BLOCK_A + tl.arange(0, BLOCK_B)
        mb = rmask[:, None] & (cb < C)[None, :]
        xb = tl.load(x_ptr + base[:, None] + cb[None, :], mask=mb, other=0.0,
                     eviction_policy=EVICT).to(tl.float32)
    if SHIFTED:
        k = tl.load(x_ptr + base, mask=rmask, other=0.0).to(tl.float32)
        da = tl.where(ma, xa - k[:, None], 0.0)
        s1 = tl.sum(da, axis=1)
        s2 = tl.sum(da * da, axis=1)
        if BLOCK_B > 0:
            dbb = tl.where(mb, xb - k[:, None], 0.0)
            s1 += tl.sum(dbb, axis=1)
            s2 += tl.sum(dbb * dbb, axis=1)
        m1 = s1 / C
        mean = k + m1
        var = tl.maximum(s2 / C - m1 * m1, 0.0)
    else:
        s1 = tl.sum(xa, axis=1)
        if BLOCK_B > 0:
            s1 += tl.sum(xb, axis=1)
        mean = s1 / C
        xca = tl.where(ma, xa - mean[:, None], 0.0)
        s2 = tl.sum(xca * xca, axis=1)
        if BLOCK_B > 0:
            xcb = tl.where(mb, xb - mean[:, None], 0.0)
            s2 += tl.sum(xcb * xcb, axis=1)
        var = s2 / C
    rstd = 1.0 / tl.sqrt(var + eps)
    wa = tl.load(w_ptr + ca, mask=ca < C, other=0.0).to(tl.float32)
    ba = tl.load(b_ptr + ca, mask=ca < C, other=0.0).to(tl.float32)
    ya = (xa - mean[:, None]) * rstd[:, None] * wa[None, :] + ba[None, :]
    tl.store(y_ptr + base[:, None] + ca[None, :], ya.to(y_ptr.dtype.element_ty), mask=ma, eviction_policy=SEVICT)
    if BLOCK_B > 0:
        wb = tl.load(w_ptr + cb, mask=cb < C, other=0.0).to(tl.float32)
        bb = tl.load(b_ptr + cb, mask=cb < C, other=0.0).to(tl.float32)
        yb = (xb - mean[:, None]) * rstd[:, None] * wb[None, :] + bb[None, :]
        tl.store(y_ptr + base[:, None] + cb[None, :], yb.to(y_ptr.dtype.element_ty), mask=mb,
                 eviction_policy=SEVICT)
    tl.store(mean_ptr + rows, mean, mask=rmask)
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


@kernel
def _bwd(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr, sync_ptr, dw_ptr, db_ptr, N, C, BPP,
         ROWS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, STAGES: tl.constexpr,
         ACC_ROWS: tl.constexpr, CONTIG: tl.constexpr, EVICT: tl.constexpr, FUSED: tl.constexpr,
         FIN_C: tl.constexpr, FIN_G: tl.constexpr, PDL: tl.constexpr):
    # program pid walks row blocks pid*BPP .. (CONTIG) or pid, pid + G, ...; writes its (dweight, dbias)
    # partial row; FUSED: waits for every program (all resident), then adds FIN_C columns of the
    # partials into dw/db itself (no second launch)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if PDL:  # the finish kernel may start (and wait in gdc_wait) while this one runs
        gdc_launch_dependents()
    nblk = tl.cdiv(N, ROWS)
    if CONTIG:
        first = pid * BPP
        stride = 1
        count = tl.minimum(BPP, nblk - first)
    else:
        first = pid
        stride = nprog
        count = tl.cdiv(nblk - pid, nprog)
    ca = tl.arange(0, BLOCK_A)
    wa = tl.load(w_ptr + ca, mask=ca < C, other=0.0).to(tl.float32)
    if ACC_ROWS:
        dwa = tl.zeros((ROWS, BLOCK_A), dtype=tl.float32)
        dba = tl.zeros((ROWS, BLOCK_A), dtype=tl.float32)
    else:
        dwa = tl.zeros((BLOCK_A,), dtype=tl.float32)
        dba = tl.zeros((BLOCK_A,), dtype=tl.float32)
    if BLOCK_B > 0:
        cb = BLOCK_A + tl.arange(0, BLOCK_B)
        wb = tl.load(w_ptr + cb, mask=cb < C, other=0.0).to(tl.float32)
        if ACC_ROWS:
            dwb = tl.zeros((ROWS, BLOCK_B), dtype=tl.float32)
            dbb = tl.zeros((ROWS, BLOCK_B), dtype=tl.float32)
        else:
            dwb = tl.zeros((BLOCK_B,), dtype=tl.float32)
            dbb = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for i in tl.range(0, count, num_stages=STAGES):
        rows = (first + i * stride) * ROWS + tl.arange(0, ROWS)
        rmask = rows < N
        base = rows.to(tl.int64)[:, None] * C
        ma = rmask[:, None] & (ca < C)[None, :]
        xa = tl.load(x_ptr + base + ca[None, :], mask=ma, other=0.0, eviction_policy=EVICT).to(tl.float32)
        ga = tl.load(dy_ptr + base + ca[None, :], mask=ma, other=0.0, eviction_policy=EVICT).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)[:, None]
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)[:, None]
        xha = tl.where(ma, (xa - mean) * rstd, 0.0)
        gwa = ga * wa[None, :]
        c1 = tl.sum(gwa, axis=1)
        c2 = tl.sum(gwa * xha, axis=1)
        if BLOCK_B > 0:
            mb = rmask[:, None] & (cb < C)[None, :]
            xb = tl.load(x_ptr + base + cb[None, :], mask=mb, other=0.0, eviction_policy=EVICT).to(tl.float32)
            gb_ = tl.load(dy_ptr + base + cb[None, :], mask=mb, other=0.0, eviction_policy=EVICT).to(tl.float32)
            xhb = tl.where(mb, (xb - mean) * rstd, 0.0)
            gwb = gb_ * wb[None, :]
            c1 += tl.sum(gwb, axis=1)
            c2 += tl.sum(gwb * xhb, axis=1)
        c1 = (c1 / C)[:, None]
        c2 = (c2 / C)[:, None]
        tl.store(dx_ptr + base + ca[None, :], (rstd * (gwa - c1 - xha * c2)).to(dx_ptr.dtype.element_ty), mask=ma)
        if ACC_ROWS:
            dwa += ga * xha
            dba += ga
        else:
            dwa += tl.sum(ga * xha, axis=0)
            dba += tl.sum(ga, axis=0)
        if BLOCK_B > 0:
            tl.store(dx_ptr + base + cb[None, :], (rstd * (gwb - c1 - xhb * c2)).to(dx_ptr.dtype.element_ty),
                     mask=mb)
            if ACC_ROWS:
                dwb += gb_ * xhb
                dbb += gb_
            else:
                dwb += tl.sum(gb_ * xhb, axis=0)
                dbb += tl.sum(gb_, axis=0)
    prow = partial_ptr + pid * 2 * C
    if ACC_ROWS:
        tl.store(prow + ca, tl.sum(dwa, axis=0), mask=ca < C)
        tl.store(prow + C + ca, tl.sum(dba, axis=0), mask=ca < C)
    else:
        tl.store(prow + ca, dwa, mask=ca < C)
        tl.store(prow + C + ca, dba, mask=ca < C)
    if BLOCK_B > 0:
        if ACC_ROWS:
            tl.store(prow + cb, tl.sum(dwb, axis=0), mask=cb < C)
            tl.store(prow + C + cb, tl.sum(dbb, axis=0), mask=cb < C)
        else:
            tl.store(prow + cb, dwb, mask=cb < C)
            tl.store(prow + C + cb, dbb, mask=cb < C)
    if FUSED:
        tl.debug_barrier()  # every thread's partial stores before the release below
        arrived = tl.atomic_add(sync_ptr, 1, sem="release") + 1
        while arrived < nprog:
            arrived = tl.atomic_add(sync_ptr, 0, sem="acquire")
        tl.debug_barrier()
        for c0 in range(pid * FIN_C, 2 * C, nprog * FIN_C):
            cols = c0 + tl.arange(0, FIN_C)
            acc = tl.zeros((FIN_C,), dtype=tl.float32)
            for g0 in range(0, nprog, FIN_G):
                g = g0 + tl.arange(0, FIN_G)
                acc += tl.sum(tl.load(partial_ptr + g[:, None] * 2 * C + cols[None, :],
                                      mask=(g < nprog)[:, None] & (cols < 2 * C)[None, :], other=0.0,
                                      cache_modifier=".cg"), axis=0)
            mw = cols < C
            old = tl.load(dw_ptr + cols, mask=mw, other=0.0).to(tl.float32)
            tl.store(dw_ptr + cols, (old + acc).to(dw_ptr.dtype.element_ty), mask=mw)
            cbias = cols - C
            mbias = (cbias >= 0) & (cbias < C)
            old = tl.load(db_ptr + cbias, mask=mbias, other=0.0).to(tl.float32)
            tl.store(db_ptr + cbias, (old + acc).to(db_ptr.dtype.element_ty), mask=mbias)
        tl.debug_barrier()
        left = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel") + 1
        if left == nprog:  # the last one out resets the counters for the next launch
            tl.atomic_xchg(sync_ptr, 0)
            tl.atomic_xchg(sync_ptr + 1, 0)


@kernel
def _copy_bound(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(b_ptr + offs, tl.load(a_ptr + offs, mask=offs < n), mask=offs < n)


@kernel
def _add_bound(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)


def _split(cfg):
    """(BLOCK_A, BLOCK_B): one padded power of two, or C = 512 + 256 exactly (split=True)."""
    if cfg.get("split"):
        a = 1 << (C.bit_length() - 1)
        rest = C - a
        return a, (0 if rest == 0 else 1 << (rest - 1).bit_length())
    return 1 << (C - 1).bit_length(), 0


def fwd_call(x, w, b, y, mean, rstd, cfg, xp):
    N = x.shape[0]
    ba, bb = _split(cfg)
    launch(_fwd, (cdiv(N, cfg["rows"]),), x, w, b, y, mean, rstd, N, C, EPS, ROWS=cfg["rows"], BLOCK_A=ba,
           BLOCK_B=bb, SHIFTED=cfg.get("shifted", False), EVICT=cfg.get("evict", ""), SEVICT=cfg.get("sevict", ""),
           num_warps=cfg["warps"])


def _groups(N, cfg, xp):
    nblk = cdiv(N, cfg["rows"])
    G = max(1, min(nblk, cfg["per_sm"] * _common.num_sms(xp)))
    bpp = cdiv(nblk, G)
    if cfg.get("contig"):
        G = cdiv(nblk, bpp)
    return G, bpp


_SYNC: dict = {}


def bwd_call(x, w, dy, mean, rstd, dx, gw, gb, cfg, xp, finish=True, partial=None):
    N = x.shape[0]
    ba, bb = _split(cfg)
    G, bpp = _groups(N, cfg, xp)
    if partial is None:
        partial = xp.empty((G, 2 * C), dtype="float32")
    fused = cfg.get("fused", False)
    if xp.__name__ not in _SYNC:
        _SYNC[xp.__name__] = xp.zeros((2,), dtype="int32")
    extra = {"launch_cooperative_grid": True} if cfg.get("coop") else {}
    launch(_bwd, (G,), x, w, dy, mean, rstd, dx, partial, _SYNC[xp.__name__], gw, gb, N, C, bpp,
           ROWS=cfg["rows"], BLOCK_A=ba, BLOCK_B=bb, STAGES=cfg["stages"], ACC_ROWS=cfg.get("acc_rows", False),
           CONTIG=cfg.get("contig", False), EVICT=cfg.get("evict", ""), FUSED=fused, FIN_C=8,
           FIN_G=min(1024, 1 << (G - 1).bit_length()), PDL=bool(cfg.get("pdl")), num_warps=cfg["warps"], **extra)
    if finish and not fused:
        if cfg.get("pdl"):
            fc, fg, fw = cfg["pdl"]
            # the product's finish as a programmatic dependent of the backward (at these parameters)
            launch(_reduce._colsum_finish, (cdiv(C, fc), 2), partial, gw, gb, G, C, BLOCK_G=fg, BLOCK_C=fc,
                   DEPENDENT=True, num_warps=fw, launch_pdl=True)
        else:
            _reduce.finish_into(partial, gw, gb)


def _name(cfg, direction):
    s = f"{'split' if cfg.get('split') else 'pad'}-r{cfg['rows']}w{cfg['warps']}"
    if direction == "backward":
        s += f"-g{cfg['per_sm']}-s{cfg['stages']}" + ("-accrows" if cfg.get("acc_rows") else "")
        s += "-contig" if cfg.get("contig") else ""
        s += ("-fused" if cfg.get("fused") else "") + ("-coop" if cfg.get("coop") else "")
        s += f"-pdl{cfg['pdl'][0]}x{cfg['pdl'][1]}w{cfg['pdl'][2]}" if cfg.get("pdl") else ""
    if cfg.get("shifted"):
        s += "-shift"
    if cfg.get("evict"):
        s += "-ef"
    if cfg.get("sevict"):
        s += "-sef"
    return s


EF = "evict_first"


def _fwd_candidates():
    c = [dict(rows=4, warps=4), dict(rows=4, warps=4, evict=EF), dict(rows=4, warps=4, shifted=True),
         dict(rows=4, warps=4, shifted=True, evict=EF)]
    for rows, warps in [(2, 4), (8, 4), (4, 8), (8, 8)]:
        c.append(dict(rows=rows, warps=warps, shifted=True, evict=EF))
    c += [dict(rows=4, warps=4, split=True), dict(rows=4, warps=4, split=True, evict=EF),
          dict(rows=4, warps=4, split=True, shifted=True, evict=EF)]
    for rows, warps in [(2, 4), (8, 4), (4, 2), (2, 2), (8, 8), (16, 8)]:
        c.append(dict(rows=rows, warps=warps, split=True, shifted=True, evict=EF))
    c += [dict(rows=4, warps=4, evict=EF, sevict=EF), dict(rows=4, warps=4, shifted=True, evict=EF, sevict=EF),
          dict(rows=4, warps=4, split=True, shifted=True, evict=EF, sevict=EF)]
    return {_name(x, "forward"): x for x in c}


def _bwd_candidates():
    c = [dict(rows=4, warps=4, per_sm=2, stages=3),  # round 1's best
         dict(rows=4, warps=4, per_sm=2, stages=3, contig=True),
         dict(rows=4, warps=4, per_sm=2, stages=2), dict(rows=4, warps=4, per_sm=2, stages=4),
         dict(rows=4, warps=4, per_sm=3, stages=3), dict(rows=4, warps=4, per_sm=3, stages=3, evict=EF),
         dict(rows=2, warps=4, per_sm=4, stages=3),
         dict(rows=4, warps=4, per_sm=2, stages=3, split=True), dict(rows=4, warps=4, per_sm=3, stages=3, split=True),
         dict(rows=4, warps=4, per_sm=3, stages=3, split=True, acc_rows=True),
         dict(rows=4, warps=4, per_sm=4, stages=2, split=True, acc_rows=True),
         dict(rows=2, warps=4, per_sm=4, stages=3, split=True, acc_rows=True),
         dict(rows=4, warps=4, per_sm=2, stages=3, pdl=(32, 128, 4)),
         dict(rows=4, warps=4, per_sm=2, stages=3, pdl=(16, 256, 8)),
         dict(rows=4, warps=4, per_sm=3, stages=3, pdl=(16, 256, 8)),
         dict(rows=4, warps=4, per_sm=2, stages=3, fused=True),
         dict(rows=4, warps=4, per_sm=2, stages=3, fused=True, coop=True),
         dict(rows=4, warps=4, per_sm=3, stages=3, fused=True, coop=True),
         dict(rows=4, warps=4, per_sm=2, stages=3, split=True, acc_rows=True, fused=True, coop=True)]
    return {_name(x, "backward"): x for x in c}


FWD = _fwd_candidates()
BWD = _bwd_candidates()

#: the product's own kernels at its configuration (None: layernorm.CONFIG) and at neighbours of it,
#: through layernorm.normalize / normalize_backward(config=): fewer or more rows a block; fewer or
#: more programs per SM, a shallower pipeline
PRODUCT_FWD = {"product": None, "product-rows2": layernorm.RowsConfig(elems=2048, num_warps=4),
               "product-rows8w8": layernorm.RowsConfig(elems=8192, num_warps=8)}
PRODUCT_BWD = {"product": None, "product-g2": layernorm.RowsConfig(elems=4096, num_warps=4, per_sm=2, stages=3),
               "product-g4s2": layernorm.RowsConfig(elems=4096, num_warps=4, per_sm=4, stages=2)}


def product_fwd_call(x, w, b, y, cfg):
    return layernorm.normalize(x, w, b, y, EPS, config=cfg)


def product_bwd_call(saved, dy, dx, gw, gb, cfg):
    layernorm.normalize_backward(saved, dy, dx, {"weight": gw, "bias": gb}, config=cfg)


# ---- compiling for sm_90 (here: a check; on the device: all candidates at once, in parallel) -----------
def _record_all(N=16384):
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    x, w = np.empty((N, C), bf), np.empty((C,), bf)
    st = np.empty((N,), np.float32)
    entries = []
    for name, cfg in FWD.items():
        with _runtime.recording() as rec:
            fwd_call(x, w, w, x, st, st, cfg, np)
        entries += [("fwd " + name, e) for e in rec]
    for name, cfg in BWD.items():
        if cfg.get("coop") or cfg.get("pdl"):
            continue  # options the recorded compile does not take: compiled on first launch
        with _runtime.recording() as rec:
            bwd_call(x, w, x, st, st, x, w, w, cfg, np)
        entries += [("bwd " + name, e) for e in rec]
    for k in (_copy_bound, _add_bound):
        with _runtime.recording() as rec:
            launch(k, (N * C // 4096,), *([x.reshape(-1)] * (2 if k is _copy_bound else 3)), N * C, BLOCK=4096,
                   num_warps=4)
        entries += [(k.__name__, e) for e in rec]
    for name, cfg in PRODUCT_FWD.items():  # the product's own launches
        with _runtime.recording() as rec:
            product_fwd_call(x, w, w, x, cfg)
        entries += [("fwd " + name, e) for e in rec]
    for name, cfg in PRODUCT_BWD.items():
        with _runtime.recording() as rec:
            product_bwd_call(layernorm.Saved(x, w, st, st), x, x, w, w.copy(), cfg)
        entries += [("bwd " + name, e) for e in rec]
    seen, out = set(), []
    for name, e in entries:
        key = (e["kernel"].__name__, str(e["signature"]), str(sorted(e["constexprs"].items())), str(e["attrs"]),
               e["num_warps"], e["num_stages"])
        if key not in seen:
            seen.add(key)
            out.append((name, e))
    return out


_ENTRIES: list = []


def _compile_one(i):
    t = time.time()
    try:
        k = _runtime.compile_recorded(_ENTRIES[i][1], arch=90)
        md = k.metadata
        ptx = k.asm.get("ptx", "")
        return i, time.time() - t, None, dict(regs=getattr(k, "n_regs", None), shared=md.shared,
                                              cp_async=ptx.count("cp.async"), ld_v4=ptx.count("ld.global.v4"))
    except Exception as exc:
        return i, time.time() - t, f"{type(exc).__name__}: {str(exc)[:300]}", None


def precompile(log, procs):
    t0 = time.time()
    _ENTRIES[:] = _record_all()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        res = pool.map(_compile_one, range(len(_ENTRIES)), chunksize=1)
    info = {}
    for i, dt, err, md in res:
        name = _ENTRIES[i][0]
        info[name] = md or {"error": err}
        log(f"  compiled {name}: {err or md} ({dt:.1f} s)")
    log(f"precompiled {len(_ENTRIES)} kernels in {time.time() - t0:.1f} s")
    return info


# ---- CPU check: the interpreter at tiny shapes ---------------------------------------------------------
def ref_forward(x, w, b):
    x = x.astype(np.float64)
    mean = x.mean(1, keepdims=True)
    var = ((x - mean) ** 2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + EPS)
    return (x - mean) * rstd * w.astype(np.float64) + b.astype(np.float64), mean[:, 0], rstd[:, 0]


def check_cpu():
    global C
    rng = np.random.default_rng(0)
    C = 768
    _common.num_sms = lambda xp: 2  # a tiny grid: each program walks several row blocks
    for N in (37,):
        x = (rng.standard_normal((N, C)) * 2 + 0.3).astype(np.float32)
        w = (rng.standard_normal(C) * 0.5 + 1).astype(np.float32)
        b = (rng.standard_normal(C) * 0.5).astype(np.float32)
        dy = rng.standard_normal((N, C)).astype(np.float32)
        yr, mr, sr = ref_forward(x, w, b)
        xh = (x - mr[:, None]) * sr[:, None]
        g = dy * w
        dxr = sr[:, None] * (g - g.mean(1, keepdims=True) - xh * (g * xh).mean(1, keepdims=True))
        with _runtime.interpreter():
            for name, cfg in FWD.items():
                y = np.full_like(x, np.nan)
                mean, rstd = np.full(N, np.nan, np.float32), np.full(N, np.nan, np.float32)
                fwd_call(x, w, b, y, mean, rstd, cfg, np)
                e = max(np.abs(y - yr).max(), np.abs(mean - mr).max(), np.abs(rstd - sr).max() / sr.max())
                print(f"fwd {name}: err {e:.2e}", flush=True)
                assert e < 1e-4, name
            for name, cfg in BWD.items():
                if cfg.get("fused") or cfg.get("pdl"):
                    continue  # programs wait for each other (the interpreter runs them one at a time); PTX
                cfg = dict(cfg, per_sm=1)
                dx = np.full_like(x, np.nan)
                gw, gb = np.ones(C, np.float32), np.ones(C, np.float32)
                bwd_call(x, w, dy, mr.astype(np.float32), sr.astype(np.float32), dx, gw, gb, cfg, np)
                e = max(np.abs(dx - dxr).max() / np.abs(dxr).max(), np.abs(gw - 1 - (dy * xh).sum(0)).max() / N,
                        np.abs(gb - 1 - dy.sum(0)).max() / N)
                print(f"bwd {name}: err {e:.2e}", flush=True)
                assert e < 1e-4, name
            for name, cfg in PRODUCT_FWD.items():
                y = np.full_like(x, np.nan)
                saved = product_fwd_call(x, w, b, y, cfg)
                e = max(np.abs(y - yr).max(), np.abs(saved.mean - mr).max(), np.abs(saved.rstd - sr).max() / sr.max())
                print(f"fwd {name}: err {e:.2e}", flush=True)
                assert e < 1e-4, name
            saved = layernorm.Saved(x, w, mr.astype(np.float32), sr.astype(np.float32))
            for name, cfg in PRODUCT_BWD.items():
                dx = np.full_like(x, np.nan)
                gw, gb = np.ones(C, np.float32), np.ones(C, np.float32)
                product_bwd_call(saved, dy, dx, gw, gb, cfg)
                e = max(np.abs(dx - dxr).max() / np.abs(dxr).max(), np.abs(gw - 1 - (dy * xh).sum(0)).max() / N,
                        np.abs(gb - 1 - dy.sum(0)).max() / N)
                print(f"bwd {name}: err {e:.2e}", flush=True)
                assert e < 1e-4, name
    print("cpu check passed")


# ---- the GPU run -----------------------------------------------------------------------------------------
def run(out_path, budget_s, dry=False):
    """The GPU run; dry=True runs the same steps on NumPy under the interpreter (float32, tiny N)."""
    import ml_dtypes
    from euler_core.measure.timing import CpuTimer, CudaTimer, TimingConfig, measure

    if dry:
        cp, bf, sizes = np, np.float32, (40,)
        _common.num_sms = lambda xp: 2
    else:
        import cupy as cp
        bf, sizes = ml_dtypes.bfloat16, (16384, 32768)
    results = {"meta": {}, "compile": {}, "records": []}

    def save():
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    def log(s):
        print(f"[{time.time() - T0:6.1f}s] {s}", flush=True)

    if not dry:
        results["compile"] = precompile(log, max(1, (os.cpu_count() or 2) - 2))  # forks: before CUDA starts
        dev = cp.cuda.Device()
        results["meta"] = {"gpu": cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode(),
                           "sms": _common.num_sms(cp), "torch": getattr(torch, "__version__", None),
                           "triton": _runtime.triton.__version__}
    save()
    timer = CpuTimer() if dry else CudaTimer()
    tcfg = TimingConfig.quick() if dry else TimingConfig(
        warmup_s=0.02, warmup_calls=2, sample_s=1.5e-3, min_samples=7, max_samples=15, min_time_s=0.06,
        max_time_s=0.5)
    rng = np.random.default_rng(1)

    def randn(shape, dtype=np.float32):
        return cp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    def t(call, n_sets):
        tm = measure(call, n_sets, timer, tcfg)
        return tm.p50, tm.p20, tm.p80

    def rec(**r):
        results["records"].append(r)
        if r.get("us"):
            r["pct_copy_peak"] = round(100 * r["bytes"] / (r["us"] * 1e-6) / 4.25e12, 1)
        log(" ".join(f"{k}={v}" for k, v in r.items()))
        save()

    def bf16(shape, scale=1.0, shift=0.0):
        return (randn(shape) * scale + shift).astype(bf)

    def poison(a):
        if a.dtype.itemsize == 2:
            a.view(cp.uint16).fill(0x7FC0)      # a bf16 NaN
        else:
            a.view(cp.uint32).fill(0x7FC00000)  # a float32 NaN

    def relerr(a, ref):
        a = a.astype(cp.float64)
        if not bool(cp.isfinite(a).all()):
            return float("inf")
        return float(cp.abs(a - ref).max() / cp.abs(ref).max())

    def measure_n(N, fused_phase):
        fbytes = 2 * N * C * 2 + 2 * C * 2 + 2 * N * 4
        bbytes = 3 * N * C * 2 + 3 * 2 * C * 2 + 2 * N * 4
        S = 4
        xs = [bf16((N, C), 2.0, 0.3) for _ in range(S)]
        ys = [cp.empty((N, C), bf) for _ in range(S)]
        dys = [bf16((N, C)) for _ in range(S)]
        w, b = bf16((C,), 0.5, 1.0), bf16((C,), 0.5)
        means = [cp.empty((N,), cp.float32) for _ in range(S)]
        rstds = [cp.empty((N,), cp.float32) for _ in range(S)]
        # float64 reference of set 0
        x64, w64, b64, dy64 = (a.astype(cp.float64) for a in (xs[0], w, b, dys[0]))
        m64 = x64.mean(1, keepdims=True)
        r64 = 1 / cp.sqrt(((x64 - m64) ** 2).mean(1, keepdims=True) + EPS)
        xh64 = (x64 - m64) * r64
        y64 = xh64 * w64 + b64
        g64 = dy64 * w64
        dx64 = r64 * (g64 - g64.mean(1, keepdims=True) - xh64 * (g64 * xh64).mean(1, keepdims=True))
        gw0, gb0 = bf16((C,)), bf16((C,))
        dw64 = gw0.astype(cp.float64) + (dy64 * xh64).sum(0)
        db64 = gb0.astype(cp.float64) + dy64.sum(0)
        saves = []
        for i in range(S):  # statistics for the backward, from the product
            _, st = layernorm.forward({"x": xs[i], "weight": w, "bias": b}, {"eps": EPS}, out=ys[i])
            means[i][...] = st.mean
            rstds[i][...] = st.rstd
            saves.append(st)
        dxs = [cp.empty((N, C), bf) for _ in range(S)]
        gws, gbs = [cp.zeros((C,), bf) for _ in range(S)], [cp.zeros((C,), bf) for _ in range(S)]

        def check_fwd(call):
            poison(ys[0])
            poison(means[0])
            poison(rstds[0])
            call(0)
            return max(relerr(ys[0], y64), relerr(means[0], m64[:, 0]), relerr(rstds[0], r64[:, 0]))

        def check_bwd(call):
            poison(dxs[0])
            gws[0][...] = gw0
            gbs[0][...] = gb0
            call(0)
            return max(relerr(dxs[0], dx64), relerr(gws[0], dw64), relerr(gbs[0], db64))

        def out_of_time():
            if time.time() - T0 > budget_s:
                log("time budget reached: stopping")
                return True
            return False

        def run_bwd(names):
            for name in names:
                cfg = BWD[name]
                if out_of_time():
                    return
                try:
                    G, _ = _groups(N, cfg, cp)
                    parts = [cp.empty((G, 2 * C), cp.float32) for _ in range(S)]

                    def call(i, cfg=cfg, finish=True):
                        bwd_call(xs[i], w, dys[i], means[i], rstds[i], dxs[i], gws[i], gbs[i], cfg, cp,
                                 finish=finish, partial=parts[i])
                    err = check_bwd(call)
                    err2 = check_bwd(call)  # twice: the fused finish's counters reset themselves
                    err = max(err, err2)
                    us = main = (None,)
                    if err < 2e-2:
                        us = t(call, S)
                        if not cfg.get("fused"):
                            main = t(lambda i: call(i, finish=False), S)
                    rec(N=N, direction="backward", impl=name, bytes=bbytes, us=us[0] and round(us[0] * 1e6, 2),
                        main_us=main[0] and round(main[0] * 1e6, 2), G=G, err=err)
                except Exception as exc:
                    rec(N=N, direction="backward", impl=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")

        if fused_phase:
            run_bwd([n for n, c in BWD.items() if c.get("fused")])
            return

        # the achievable bound: plain kernels moving the same bytes (cudaMemcpy; Triton copy, 2-read add)
        a = [cp.empty((N * C,), cp.int16) for _ in range(S)]
        bb = [cp.empty((N * C,), cp.int16) for _ in range(S)]
        cc = [cp.empty((N * C,), cp.int16) for _ in range(S)]
        us = t(lambda i: cp.copyto(bb[i], a[i]), S)
        rec(N=N, direction="forward", impl="cupy-copy", bytes=4 * N * C, us=round(us[0] * 1e6, 2))
        for blk in (4096, 8192):
            us = t(lambda i: launch(_copy_bound, (cdiv(N * C, blk),), a[i], bb[i], N * C, BLOCK=blk, num_warps=4), S)
            rec(N=N, direction="forward", impl=f"triton-copy{blk}", bytes=4 * N * C, us=round(us[0] * 1e6, 2))
            us = t(lambda i: launch(_add_bound, (cdiv(N * C, blk),), a[i], bb[i], cc[i], N * C, BLOCK=blk,
                                    num_warps=4), S)
            rec(N=N, direction="backward", impl=f"triton-add{blk}", bytes=6 * N * C, us=round(us[0] * 1e6, 2))
        del a, bb, cc

        if torch is not None and not dry:
            def th(arr):
                return torch.as_tensor(arr.view(cp.int16), device="cuda").view(torch.bfloat16)
            txs = [th(x).clone().requires_grad_(True) for x in xs]
            tw, tb = th(w).clone().requires_grad_(True), th(b).clone().requires_grad_(True)
            F = torch.nn.functional
            us = t(lambda i: F.layer_norm(txs[i], (C,), tw, tb, EPS), S)
            rec(N=N, direction="forward", impl="torch", bytes=fbytes, us=round(us[0] * 1e6, 2))
            tys = [F.layer_norm(tx, (C,), tw, tb, EPS) for tx in txs]
            tdys = [th(d) for d in dys]
            us = t(lambda i: torch.autograd.grad(tys[i], (txs[i], tw, tb), tdys[i], retain_graph=True), S)
            rec(N=N, direction="backward", impl="torch", bytes=bbytes, us=round(us[0] * 1e6, 2))
            del txs, tys, tdys
            torch.cuda.empty_cache()

        for name, cfg in PRODUCT_FWD.items():  # the product's forward writes its own mean/rstd: y checked
            def product_fwd(i, cfg=cfg):
                product_fwd_call(xs[i], w, b, ys[i], cfg)
            poison(ys[0])
            product_fwd(0)
            err = relerr(ys[0], y64)
            us = t(product_fwd, S)
            rec(N=N, direction="forward", impl=name, bytes=fbytes, us=round(us[0] * 1e6, 2), err=err)
        for name, cfg in PRODUCT_BWD.items():
            def product_bwd(i, cfg=cfg):
                product_bwd_call(saves[i], dys[i], dxs[i], gws[i], gbs[i], cfg)
            err = check_bwd(product_bwd)
            us = t(product_bwd, S)
            rec(N=N, direction="backward", impl=name, bytes=bbytes, us=round(us[0] * 1e6, 2), err=err)

        for name, cfg in FWD.items():
            if out_of_time():
                return
            try:
                def call(i, cfg=cfg):
                    fwd_call(xs[i], w, b, ys[i], means[i], rstds[i], cfg, cp)
                err = check_fwd(call)
                us = t(call, S) if err < 2e-2 else (None,)
                rec(N=N, direction="forward", impl=name, bytes=fbytes, us=us[0] and round(us[0] * 1e6, 2),
                    p20_80=us[0] and [round(us[1] * 1e6, 2), round(us[2] * 1e6, 2)], err=err)
            except Exception as exc:
                rec(N=N, direction="forward", impl=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        run_bwd([n for n, c in BWD.items() if not c.get("fused")])

    for fused_phase in (False, True):  # the fused finish (programs wait on each other) last
        if dry and fused_phase:
            break
        for N in sizes:
            measure_n(N, fused_phase)
            if not dry:
                cp.get_default_memory_pool().free_all_blocks()
    log("done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check-cpu", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="the GPU run's steps on NumPy, interpreted")
    ap.add_argument("--budget-s", type=float, default=100.0)
    args = ap.parse_args()
    if args.check_cpu:
        check_cpu()
    elif args.compile_only:
        info = precompile(print, 2)
        bad = [k for k, v in info.items() if "error" in v]
        print(f"{len(info)} compiled, {len(bad)} failed: {bad}")
    elif args.dry_run:
        with _runtime.interpreter():
            run(args.out, args.budget_s, dry=True)
    else:
        run(args.out, args.budget_s)


if __name__ == "__main__":
    main()
