"""Triton matmul launch configs beside cuBLAS on the H200, GPT-2 124M linears (C = 768), bf16.

    python3 bench/tune/matmul_sweep.py --out DIR/matmul.json [--compile-only]

For every (N, linear, what) in the plan (--plan) - a forward, a whole backward as matmul.backward makes it
(dx = dy W, dW += dy^T x, db += sum_n dy), dx alone, or the column sum alone - each variant (launch configs of
the one `_gemm` kernel, None = the product's own) is checked on fresh random inputs, outputs
poisoned with NaN and accumulated gradients pre-filled, against float32 PyTorch on the upcast
inputs (TF32 off), then timed with euler_core.measure.timing (batches queued behind the spin kernel,
CUDA events; medians), rotating input copies like `euler bench ops`. cuBLAS (torch addmm; for the
backward matmul + addmm_ + sum + add_) is timed the same way in the same process, before and after
the variants; ratios are against the mean of the two. Every launch is compiled for sm_90 first in a
process pool. Results are written after every measurement (a timeout still leaves data)."""

import argparse
import json
import multiprocessing
import os
import sys
import time

try:
    import torch  # before backends.triton: its runtime blocks a later torch import  # noqa: I001
except ImportError:  # the CPU machine: --compile-only
    torch = None

import numpy as np

from backends.triton import _reduce, _runtime, matmul
from backends.triton._runtime import xp_of
from euler_core.measure.timing import CudaTimer, TimingConfig, measure

LINEARS = {"qkv": (768, 2304, True), "attn_proj": (768, 768, True), "fc": (768, 3072, True),
           "fc_proj": (3072, 768, True), "lm_head": (768, 50304, False)}


def tile(bm, bn, stages, warps=8, c=1, h=2, g=8, flat=True, split=16, busy=0.8, **kw) -> matmul.GemmConfig:
    """A candidate in the names' shorthand (reports/triton-h200/notes-matmul.md, round 1)."""
    return matmul.GemmConfig(bm, bn, 64, num_warps=warps, num_stages=stages, group_m=g, flatten=flat, ctas_per_sm=c,
                             epi_halves=h, split_k=split, busy=busy, **kw)


#: round 1 (reports/triton-h200/notes-matmul.md): every product, 6-11 configs each; round 2 (this
#: plan): the new defaults (None) and their nearest alternatives, the whole backward as the model
#: calls it (dx + dW + db, db fused into the dW kernel or a separate column sum), column-sum configs
FWD = {
    "default": None,
    "128x128s3c2w4h2": tile(128, 128, 3, warps=4, c=2),
    "128x128s3c2w4h2g4": tile(128, 128, 3, warps=4, c=2, g=4),
    "128x128s3c2w4h2g16": tile(128, 128, 3, warps=4, c=2, g=16),
    "128x256s3h2": tile(128, 256, 3),
    "128x256s3h2g32": tile(128, 256, 3, g=32),
    "128x256s3h2g64": tile(128, 256, 3, g=64),
    "128x256s4h2g32": tile(128, 256, 4, g=32),
    "256x128s3h2g32": tile(256, 128, 3, g=32),
    "128x128s3c2w4h2g32": tile(128, 128, 3, warps=4, c=2, g=32),
}
FWD_FOR = {"lm_head": ("default", "128x256s3h2", "128x256s3h2g64", "128x256s4h2g32", "256x128s3h2g32",
                       "128x128s3c2w4h2g32"),
           "fc_proj": ("default", "128x128s3c2w4h2"),
           None: ("default", "128x128s3c2w4h2g4", "128x128s3c2w4h2g16", "128x256s3h2")}
#: dW configs for the backward (with the fused row sum where the linear has a bias)
DW = {
    "default": None,
    "128x256s4-noflat-ptrc": tile(128, 256, 4, flat=False, tma_store=False),
    "128x256s3b9": tile(128, 256, 3, busy=0.9),
    "128x256s3": tile(128, 256, 3),
    "128x128s4w4h1": tile(128, 128, 4, warps=4, h=1),
}
DW_FOR = {"fc": ("default", "128x256s4-noflat-ptrc", "128x256s3b9", "128x128s4w4h1"),
          "fc_proj": ("default", "128x256s4-noflat-ptrc", "128x256s3b9"),
          "qkv": ("default", "128x256s3"),
          "attn_proj": ("default", "128x256s3b9"),
          "lm_head": ("default",)}
#: round 3 (GPT-2 124M at B=64, 65536 rows): K slices four times deeper than at 16384 rows, so more
#: of them (fuller waves) may now pay for their float32 partials
DW.update({
    "128x256s4-noflat-ptrc-b95": tile(128, 256, 4, flat=False, tma_store=False, busy=0.95),
    "128x256s4-noflat-ptrc-b100": tile(128, 256, 4, flat=False, tma_store=False, busy=1.0),
    "128x128s4w4h2-b95": tile(128, 128, 4, warps=4, h=2, busy=0.95),
})
DW_FOR_B64 = {"fc": ("default", "128x256s4-noflat-ptrc-b95", "128x256s4-noflat-ptrc-b100"),
              "fc_proj": ("default", "128x256s4-noflat-ptrc-b95", "128x256s4-noflat-ptrc-b100"),
              "qkv": ("default", "128x128s4w4h2-b95", "128x256s4-noflat-ptrc-b95", "128x256s4-noflat-ptrc-b100"),
              "attn_proj": ("default", "128x256s4-noflat-ptrc-b100")}
#: gelu_matmul's dx: (dy W) * gelu'(x), the GELU's derivative in the epilogue (x's tiles through TMA
#: beside C's store, or with plain loads where C takes plain stores: -ptrc)
DX_GELU = {"default": None, "128x128s3c2w4h2": tile(128, 128, 3, warps=4, c=2),
           "128x128s3c2w4h2g4": tile(128, 128, 3, warps=4, c=2, g=4),
           "128x256s3-ptrc": tile(128, 256, 3, tma_store=False),
           "128x128s3c2w4-ptrc": tile(128, 128, 3, warps=4, c=2, tma_store=False),
           "128x256s3h1": tile(128, 256, 3, h=1), "128x256s3-noflat": tile(128, 256, 3, flat=False)}
#: dx alone (dx = dy W; fc_proj's, N x 3072 over K = 768, runs at 0.83x the forward of the same output)
DX_FOR = {None: ("default", "128x128s3c2w4h2", "128x128s3c2w4h2g4", "128x256s3h2g32")}
COLSUM = {f"g{g}r{r}c{c}w{w}": _reduce.ColsumConfig(groups=g, block_r=r, block_c=c, num_warps=w)
          for g, r, c, w in ((256, 32, 128, 4), (128, 32, 128, 4), (512, 32, 128, 4), (256, 64, 128, 4),
                             (256, 64, 128, 8), (128, 64, 256, 8), (256, 32, 256, 4), (128, 64, 128, 4),
                             (64, 64, 256, 8), (128, 128, 128, 8))}
CANDS = {"forward": FWD, "backward": DW}

#: (N, linear, what); "r2" (below) by default, "b64" with --plan b64
PLANS = {}
PLANS["r2"] = ([(16384, lin, "backward") for lin in ("fc", "fc_proj", "qkv", "attn_proj")]
        + [(N, lin, "forward") for N in (16384, 32768) for lin in ("attn_proj", "fc", "qkv", "fc_proj", "lm_head")]
        + [(32768, lin, "backward") for lin in ("fc", "fc_proj", "qkv", "attn_proj")]
        + [(N, lin, "colsum") for N in (16384,) for lin in ("fc", "qkv", "attn_proj")]
        + [(N, "lm_head", "backward") for N in (16384, 32768)])
PLANS["gelu"] = [(65536, "fc_proj", "dx_gelu"), (65536, "fc_proj", "dx")]
PLANS["b64"] = ([(65536, lin, "backward") for lin in ("fc", "fc_proj", "qkv", "attn_proj")]
                + [(65536, lin, "dx") for lin in ("fc_proj", "fc", "qkv", "attn_proj")]
                + [(65536, "qkv", "colsum")])


def cands_for(table, lin):
    names = table.get(lin, table.get(None))
    return names


def call(product, x, w, b, dy, out, cfg, rowsum=None):
    """One product through matmul.gemm exactly as matmul.forward/backward call it (cfg None: the
    product's own configuration)."""
    N, K = x.shape
    M = w.shape[0]
    if product == "forward":
        return matmul.gemm(x, w, out, (K, 1), (1, K), N, M, K, bias=b, config=cfg, weight_shape=(M, K))
    if product == "dx":
        return matmul.gemm(dy, w, out, (M, 1), (K, 1), N, K, M, config=cfg, product="dx", weight_shape=(M, K))
    return matmul.gemm(dy, x, out, (1, M), (K, 1), M, K, N, accumulate=True, rowsum=rowsum, config=cfg,
                       product="dW", weight_shape=(M, K))


def backward(x, w, dy, dx, dw, db, cfg, colsum=None):
    """matmul.backward's products with dW's config `cfg` (None: the product's); colsum: db by the
    separate column sum (a ColsumConfig) instead of fused into the dW kernel."""
    call("dx", x, w, None, dy, dx, None)
    call("dW", x, w, None, dy, dw, cfg, rowsum=db if colsum is None else None)
    if db is not None and colsum is not None:
        _reduce.colsum_into(dy, db, xp_of(dy), config=colsum)


def _thunks(N, lin, what, arrays):
    """(name, thunk) for every variant of one plan entry, on the given arrays (NumPy stand-ins when
    recording, CuPy on the GPU): x, w, b, dy, out, dx, dw, db."""
    x, w, b, dy, out, dx, dw, db = arrays
    if what == "forward":
        return [(n, lambda c=FWD[n]: call("forward", x, w, b, dy, out, c)) for n in cands_for(FWD_FOR, lin)]
    if what == "colsum":
        return [(n, lambda c=c: _reduce.colsum_into(dy, db, xp_of(dy), config=c)) for n, c in COLSUM.items()]
    if what == "dx":
        return [(n, lambda c=FWD[n]: call("dx", x, w, None, dy, dx, c)) for n in cands_for(DX_FOR, lin)]
    if what == "dx_gelu":  # x stands for the GELU's input, laid out as dx
        N, K = x.shape
        M = w.shape[0]
        return [(n, lambda c=c: matmul.gemm(dy, w, dx, (M, 1), (K, 1), N, K, M, config=c, product="dx",
                                            weight_shape=(M, K), gelu_grad_of=x)) for n, c in DX_GELU.items()]
    dw_for = DW_FOR_B64 if N == 65536 else DW_FOR
    th = [(f"dW:{n}", lambda c=DW[n]: backward(x, w, dy, dx, dw, db, c)) for n in cands_for(dw_for, lin)]
    if db is not None:
        th.append(("dW:default+colsum", lambda: backward(x, w, dy, dx, dw, db, None, colsum=_reduce.COLSUM)))
    return th


def _record_all(plan):
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    entries, seen = [], set()
    for N, lin, what in plan:
        K, M, has_bias = LINEARS[lin]
        arrays = (np.empty((N, K), bf), np.empty((M, K), bf), np.empty((M,), bf) if has_bias else None,
                  np.empty((N, M), bf), np.empty((N, M), bf), np.empty((N, K), bf), np.empty((M, K), bf),
                  np.empty((M,), bf) if has_bias or what == "colsum" else None)
        for _, thunk in _thunks(N, lin, what, arrays):
            with _runtime.recording() as rec:
                thunk()
            for e in rec:
                key = (e["kernel"].__name__, str(e["signature"]), str(sorted(e["constexprs"].items())),
                       str(e["attrs"]), e["num_warps"], e["num_stages"])
                if key not in seen:
                    seen.add(key)
                    entries.append(e)
    return entries


_ENTRIES: list = []


def _compile_one(i):
    t = time.time()
    try:
        k = _runtime.compile_recorded(_ENTRIES[i], arch=90)
        return i, time.time() - t, None, k.metadata.shared
    except Exception as exc:
        return i, time.time() - t, f"{type(exc).__name__}: {str(exc)[:300]}", None


def precompile(plan, log, procs=None):
    t0 = time.time()
    _ENTRIES[:] = _record_all(plan)
    with multiprocessing.get_context("fork").Pool(procs or max(1, (os.cpu_count() or 2) - 1)) as pool:
        res = pool.map(_compile_one, range(len(_ENTRIES)), chunksize=1)
    bad = [(i, err) for i, _, err, _ in res if err]
    log(f"precompiled {len(_ENTRIES)} launches in {time.time() - t0:.1f} s (sum {sum(r[1] for r in res):.0f} s), "
        f"{len(bad)} failed; shared memory max {max((r[3] or 0) for r in res)} B")
    for i, err in bad:
        e = _ENTRIES[i]
        log(f"  compile failed: {sorted(e['constexprs'].items())} w{e['num_warps']}s{e['num_stages']}: {err}")


def run(plan, out_path, log, tcfg):
    import cupy as cp
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = CudaTimer()
    rng = cp.random.default_rng(1234)
    records = []

    def save():
        with open(out_path, "w") as f:
            json.dump({"records": records}, f, indent=0)

    def record(**r):
        records.append(r)
        log(json.dumps(r))
        save()

    def randn(shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=cp.float32) * scale).astype(bf)

    def th(a):
        return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)

    def rel_err(o, ref):
        o = th(o).float()
        if not torch.isfinite(o).all():
            return float("inf")
        return float((o - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

    def timed(fn, S):
        return measure(fn, S, timer, tcfg)

    def one(N, lin, what):
        K, M, has_bias = LINEARS[lin]
        flops = 2 * N * K * M * (2 if what == "backward" else 1)
        if what == "colsum":  # the bias gradient's column sum alone, beside torch's sum + add_
            dy = randn((N, M))
            db, tdb, tdy = cp.zeros((M,), bf), torch.zeros(M, dtype=torch.bfloat16, device="cuda"), th(dy)
            ref = tdy.float().sum(0)
            c_sec = timed(lambda i: tdb.add_(tdy.sum(0)), 1).p50
            record(N=N, linear=lin, what=what, impl="torch", seconds=c_sec)
            for name, thunk in _thunks(N, lin, what, (None, None, None, dy, None, None, None, db)):
                db.fill(0)
                thunk()
                err = rel_err(db, ref)
                t = timed(lambda i: thunk(), 1) if err < 2e-2 else None
                record(N=N, linear=lin, what=what, impl=name, seconds=t and t.p50, err=err,
                       ratio=t and c_sec / t.p50)
            return
        per_set = (N * K + N * M) * 2
        S = max(1, min(4, -(-(128 << 20) // per_set)))
        xs = [randn((N, K)) for _ in range(S)]
        dys = [randn((N, M)) for _ in range(S)] if what != "forward" else [None] * S
        w = randn((M, K), K ** -0.5)
        b = randn((M,)) if has_bias else None
        outs = [cp.empty((N, M), bf) for _ in range(S)] if what == "forward" else [None] * S
        dxs = [cp.empty((N, K), bf) for _ in range(S)] if what != "forward" else [None] * S
        g0, db0 = randn((M, K)), randn((M,)) if has_bias else None
        dw = cp.copy(g0)
        db = cp.copy(db0) if has_bias else None
        tx, tw, tdy = [th(a) for a in xs], th(w), [th(a) if a is not None else None for a in dys]
        tb = th(b) if has_bias else None
        tdw = torch.zeros_like(tw)
        tdb = torch.zeros(M, dtype=torch.bfloat16, device="cuda")
        if what == "forward":
            cub = (lambda i: torch.addmm(tb, tx[i], tw.T)) if has_bias else (lambda i: tx[i] @ tw.T)
        elif what == "dx":
            def cub(i):
                tdy[i] @ tw
        elif what == "dx_gelu":  # the composition: dh = dy W, then the GELU's backward
            def cub(i):
                torch.ops.aten.gelu_backward(tdy[i] @ tw, tx[i], approximate="tanh")
        else:
            def cub(i):
                tdy[i] @ tw
                tdw.addmm_(tdy[i].T, tx[i])
                if has_bias:
                    tdb.add_(tdy[i].sum(0))
        c0 = timed(cub, S).p50
        record(N=N, linear=lin, what=what, impl="cublas", seconds=c0, tflops=flops / c0 / 1e12)
        fx, fw = tx[0].float(), tw.float()
        if what == "forward":
            refs = [fx @ fw.T + (tb.float() if has_bias else 0)]
        elif what == "dx":
            refs = [tdy[0].float() @ fw]
        elif what == "dx_gelu":
            refs = [torch.ops.aten.gelu_backward(tdy[0].float() @ fw, fx, approximate="tanh")]
        else:
            fdy = tdy[0].float()
            refs = [fdy @ fw, fdy.T @ fx + th(g0).float()] + ([fdy.sum(0) + th(db0).float()] if has_bias else [])
            del fdy
        del fx, fw
        results = []
        for name, _ in _thunks(N, lin, what, (xs[0], w, b, dys[0], outs[0], dxs[0], dw, db)):
            try:
                # check on set 0: outputs poisoned (NaN), accumulated gradients pre-filled
                if what == "forward":
                    outs[0].fill(cp.nan)
                else:
                    dxs[0].fill(cp.nan)
                    cp.copyto(dw, g0)
                    if has_bias:
                        cp.copyto(db, db0)
                dict(_thunks(N, lin, what, (xs[0], w, b, dys[0], outs[0], dxs[0], dw, db)))[name]()
                got = ([outs[0]] if what == "forward" else [dxs[0]] if what in ("dx", "dx_gelu")
                       else [dxs[0], dw] + ([db] if has_bias else []))
                err = max(rel_err(o, r) for o, r in zip(got, refs))
                if not err < 2e-2:
                    record(N=N, linear=lin, what=what, impl=name, seconds=None, err=err, ok=False)
                    continue
                fns = [dict(_thunks(N, lin, what, (xs[i], w, b, dys[i], outs[i], dxs[i], dw, db)))[name]
                       for i in range(S)]
                t = timed(lambda i: fns[i](), S)
                results.append((name, t, err))
            except Exception as exc:
                record(N=N, linear=lin, what=what, impl=name, seconds=None, ok=False,
                       error=f"{type(exc).__name__}: {str(exc)[:300]}")
        c1 = timed(cub, S).p50   # cuBLAS again after the candidates (clocks drift on the long ones)
        record(N=N, linear=lin, what=what, impl="cublas-after", seconds=c1)
        c_sec = (c0 + c1) / 2
        for name, t, err in results:
            record(N=N, linear=lin, what=what, impl=name, seconds=t.p50, err=err, ok=True, ratio=c_sec / t.p50,
                   tflops=flops / t.p50 / 1e12, spread=[t.p20, t.p80])

    for N, lin, what in plan:
        try:
            one(N, lin, what)
        except Exception as exc:  # a plan entry that fails (memory, ...) does not end the run
            record(N=N, linear=lin, what=what, impl="error", seconds=None,
                   error=f"{type(exc).__name__}: {str(exc)[:300]}")
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    return records


def summary(records, log):
    best = {}
    for r in records:
        if r.get("ratio"):
            k = (r["N"], r["linear"], r["what"])
            if k not in best or r["ratio"] > best[k]["ratio"]:
                best[k] = r
    log("\n| N | linear | what | best | us | vs cuBLAS |")
    for k, r in best.items():
        log(f"| {k[0]} | {k[1]} | {k[2]} | {r['impl']} | {r['seconds'] * 1e6:.1f} | {r['ratio']:.3f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--plan", choices=sorted(PLANS), default="r2",
                    help="r2: round 2 at 16384 and 32768 rows (notes-matmul.md); b64: the backward products at 65536 rows; "
                         "gelu: gelu_matmul's dx (the GELU's derivative in the epilogue) at 65536 rows, beside plain dx")
    args = ap.parse_args()
    t0 = time.time()

    def log(s):
        print(f"[{time.time() - t0:6.1f}s] {s}", flush=True)

    plan = PLANS[args.plan]
    precompile(plan, log)
    if args.compile_only:
        return
    log(json.dumps({"torch": torch.__version__, "triton": _runtime.triton.__version__, "python": sys.version.split()[0]}))
    tcfg = TimingConfig(warmup_s=0.02, warmup_calls=2, sample_s=2e-3, min_batch_gpu=10, min_samples=5,
                        max_samples=7, min_time_s=0.05, max_time_s=1.0, cache_bytes=128 << 20, max_sets=4)
    records = run(plan, args.out, log, tcfg)
    summary(records, log)
    log("done")


if __name__ == "__main__":
    main()
