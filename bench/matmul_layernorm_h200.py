"""The triton matmul and layernorm beside cuBLAS and PyTorch on the H200: check, sweep, time.

    python3 bench/matmul_layernorm_h200.py --stage sweep --out DIR    # every launch config candidate
    python3 bench/matmul_layernorm_h200.py --stage final --out DIR    # the product defaults, 16k and 32k rows

Shapes: GPT-2 124M's linears (C=768) at N = B*T rows, bf16 inputs, float32 accumulation:
qkv (K 768, M 2304), attn_proj (768, 768), fc (768, 3072), fc_proj (3072, 768), lm_head (768, 50304,
no bias); layernorm over C=768. Products: forward y = x W^T + b, dx = dy W, dW += dy^T x, db += sum dy.

Every candidate is checked before it is timed: on fresh random inputs, its outputs poisoned (NaN) or,
for the accumulated gradients, pre-filled with random values, against PyTorch in float32 on the
upcast inputs (TF32 off). Timing (METHOD.md): the median of 5 batches of k back-to-back calls
between CUDA events. "gpu" times queue the batch behind a spinning kernel, so that the Python launch
path (~20 us a launch) is hidden and the events time the GPU alone (what a CUDA graph would see);
"wall" times (final stage) are plain back-to-back calls (launch cost included). Layernorm rotates
over 4 sets of buffers (more than the 50 MB L2). cuBLAS (torch.matmul / addmm / addmm_ / sum) and
torch.nn.functional.layer_norm are timed in the same process, the same way.

Before anything touches the GPU, every launch the run will make (and those of the conformance
cases) is compiled for sm_90 in a pool of processes, filling Triton's cache (record mode,
backends.triton._runtime.recording). Results go to DIR/<stage>.json and DIR/<stage>.log; the table is
printed last.
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time

import torch  # before backends.triton: its runtime blocks a later torch import  # noqa: I001

import numpy as np

from backends.triton import _reduce, _runtime, layernorm, matmul

C = 768
LINEARS = {"qkv": (768, 2304, True), "attn_proj": (768, 768, True), "fc": (768, 3072, True),
           "fc_proj": (3072, 768, True), "lm_head": (768, 50304, False)}
PRODUCTS = ("forward", "dx", "dW")


def _tile(bm, bn, stages, warps=8, **kw):
    cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, num_warps=warps, num_stages=stages, GROUP_M=8,
               FLATTEN=True, ctas_per_sm=1, split_k=16, busy=0.8)
    cfg.update(kw)
    return cfg


#: matmul candidates (the same kernel, launch parameters and constexpr switches only)
MM_CANDIDATES = {
    "128x256s3": _tile(128, 256, 3),
    "128x256s3h2": _tile(128, 256, 3, epi_halves=2),
    "128x256s4h2": _tile(128, 256, 4, epi_halves=2),
    "256x128s3": _tile(256, 128, 3),
    "256x128s3h2": _tile(256, 128, 3, epi_halves=2),
    "256x128s4h2": _tile(256, 128, 4, epi_halves=2),
    "128x128s4": _tile(128, 128, 4),
    "128x128s3c2h2": _tile(128, 128, 3, ctas_per_sm=2, epi_halves=2),
    "128x128s4w4": _tile(128, 128, 4, warps=4),
    "128x256s3-noflat": _tile(128, 256, 3, FLATTEN=False),
    "128x256s3-grid": _tile(128, 256, 3, ctas_per_sm=None),
    "128x256s3-ptr": _tile(128, 256, 3, tma=False),
    "128x256s3-nosplit": _tile(128, 256, 3, split_k=1),
    "128x128s4-nosplit": _tile(128, 128, 4, split_k=1),
}
NOSPLIT_ONLY_DW = ("128x256s3-nosplit", "128x128s4-nosplit")

#: layernorm candidates: elements per program block (rows = elems / 1024 at C=768), warps, G per SM
LN_FWD = {f"e{e}w{w}": dict(elems=e, num_warps=w) for e in (1024, 2048, 4096, 8192) for w in (4, 8)}
LN_BWD = {f"e{e}w{w}g{g}": dict(elems=e, num_warps=w, per_sm=g)
          for e in (1024, 2048, 4096) for w in (4, 8) for g in (2, 4, 8)}


#: dW alternatives timed beside the default in the final stage (the split-K occupancy target)
FINAL_DW = {"dW-busy0.9": dict(matmul.CONFIGS[("16", "dW")], busy=0.9),
            "dW-128x128s4w4": dict(matmul.SHAPE_CONFIGS[("dW", 2304, 768)], split_k=16)}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# ---- the calls, written once for recording (NumPy stand-ins) and for the GPU ---------------------------
def mm_call(product, x, w, b, dy, out, cfg):
    """One product through matmul.gemm exactly as matmul.forward/backward call it."""
    N, K = x.shape
    M = w.shape[0]
    if product == "forward":
        return matmul.gemm(x, w, out, (K, 1), (1, K), N, M, K, bias=b, config=cfg)
    if product == "dx":
        return matmul.gemm(dy, w, out, (M, 1), (K, 1), N, K, M, config=cfg)
    return matmul.gemm(dy, x, out, (1, M), (K, 1), M, K, N, accumulate=True, config=cfg)


def _record_jobs(N):
    """(what, thunk) for every launch of the sweep at N rows, run in record mode on NumPy stand-ins."""
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    jobs = []
    for name, (K, M, has_bias) in LINEARS.items():
        x, w, dy = np.empty((N, K), bf), np.empty((M, K), bf), np.empty((N, M), bf)
        b = np.empty((M,), bf) if has_bias else None
        outs = {"forward": np.empty((N, M), bf), "dx": np.empty((N, K), bf), "dW": np.empty((M, K), bf)}
        for cname, cfg in MM_CANDIDATES.items():
            for p in PRODUCTS:
                jobs.append((f"{name} {p} {cname}", lambda p=p, x=x, w=w, b=b, dy=dy, o=outs[p], c=cfg:
                             mm_call(p, x, w, b, dy, o, c)))
    x = np.empty((N, C), bf)
    wv = np.empty((C,), bf)
    for cname, cfg in LN_FWD.items():
        jobs.append((f"ln fwd {cname}", lambda c=cfg: layernorm.forward({"x": x, "weight": wv, "bias": wv},
                                                                        {"eps": 1e-5}, config=c)))
    saved = layernorm.Saved(x, wv, np.empty((N,), np.float32), np.empty((N,), np.float32))
    for cname, cfg in LN_BWD.items():
        jobs.append((f"ln bwd {cname}", lambda c=cfg: layernorm.backward(
            saved, x, {"weight": wv, "bias": wv.copy()}, config=c)))
    return jobs


def _entries(stage):
    """Every recorded launch of this stage plus the conformance cases of matmul and layernorm."""
    from backends.triton._testing import recorded_launches
    from conformance.cases import CASES
    entries, seen = [], set()

    def add(rec):
        for e in rec:
            key = (e["kernel"].__name__, str(e["signature"]), str(sorted(e["constexprs"].items())),
                   str(e["attrs"]), e["num_warps"], e["num_stages"])
            if key not in seen:
                seen.add(key)
                entries.append(e)

    if stage == "sweep":
        for _, thunk in _record_jobs(16384):
            with _runtime.recording() as rec:
                thunk()
            add(rec)
    for op in ("matmul", "layernorm"):
        for case in CASES[op]:
            for dt in ("float32", "float16", "bfloat16"):
                add(recorded_launches(op, case.dims, dt))
        for N in (16384, 32768):
            dims = {"matmul": [{"N": N, "K": K, "M": M, "bias": hb} for K, M, hb in LINEARS.values()],
                    "layernorm": [{"N": N, "C": C}]}[op]
            for d in dims:
                add(recorded_launches(op, d, "bfloat16"))
    return entries


_ENTRIES: list = []


def _compile_one(i):
    t = time.time()
    try:
        _runtime.compile_recorded(_ENTRIES[i], arch=90)
        return i, time.time() - t, None
    except Exception as exc:  # a candidate that does not compile is reported and skipped later
        return i, time.time() - t, f"{type(exc).__name__}: {str(exc)[:300]}"


def precompile(stage, log):
    t0 = time.time()
    _ENTRIES[:] = _entries(stage)
    with multiprocessing.get_context("fork").Pool(max(1, (os.cpu_count() or 2) - 2)) as pool:
        res = pool.map(_compile_one, range(len(_ENTRIES)), chunksize=1)
    bad = [(i, err) for i, _, err in res if err]
    log(f"precompiled {len(_ENTRIES)} launches in {time.time() - t0:.1f} s "
        f"(sum {sum(r[1] for r in res):.0f} s), {len(bad)} failed")
    for i, err in bad:
        e = _ENTRIES[i]
        log(f"  compile failed: {e['kernel'].__name__} {sorted(e['constexprs'].items())} "
            f"w{e['num_warps']}s{e['num_stages']}: {err}")


# ---- GPU side -----------------------------------------------------------------------------------------
class Timer:
    def __init__(self, cp):
        self.cp = cp
        self.spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}''', "spin")
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()

    def _batch(self, fn, k, hide_launch):
        cp = self.cp
        if hide_launch:  # the GPU spins while Python enqueues the batch: the events time the GPU alone
            self.spin((1,), (1,), (np.int64(max(2e-3, k * 120e-6) * 1.98e9),))
        self.start.record()
        for i in range(k):
            fn(i)
        self.end.record()
        self.end.synchronize()
        return cp.cuda.get_elapsed_time(self.start, self.end) / 1e3 / k

    def __call__(self, fn, hide_launch=True, target_s=3e-3, batches=5):
        fn(0)
        fn(1)
        one = self._batch(fn, 1, hide_launch)
        k = int(min(100, max(3, target_s / max(one, 1e-7))))
        return median([self._batch(fn, k, hide_launch) for _ in range(batches)])


def rel_err(ours, ref):
    ours = ours.float()
    if not torch.isfinite(ours).all():
        return float("inf")
    return float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def run(stage, out_dir, log):
    import cupy as cp
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timer = Timer(cp)
    rng = cp.random.default_rng(1234)
    records = []

    def randn(shape, scale=1.0, shift=0.0):
        return (rng.standard_normal(shape, dtype=cp.float32) * scale + shift).astype(bf)

    def th(a):  # a CuPy bf16 array seen by torch (same memory)
        return torch.as_tensor(a.view(cp.int16), device="cuda").view(torch.bfloat16)

    def record(**r):
        records.append(r)
        log(json.dumps(r))

    # peak: device copy, 2 x 2 GiB moved, GPU time
    src = cp.empty(1 << 31, dtype=cp.uint8)
    dst = cp.empty_like(src)
    t = timer(lambda i: cp.copyto(dst, src), target_s=20e-3)
    peak_bw = 2 * src.nbytes / t
    log(f"copy bandwidth {peak_bw / 1e9:.0f} GB/s")
    record(kind="peak", what="copy", bytes_per_s=peak_bw)

    sizes = (16384,) if stage == "sweep" else (16384, 32768)
    final = stage == "final"

    # ---- matmul ----
    for N in sizes:
        for name, (K, M, has_bias) in LINEARS.items():
            x, w, dy = randn((N, K)), randn((M, K), K ** -0.5), randn((N, M))
            b = randn((M,)) if has_bias else None
            tx, tw, tdy = th(x).float(), th(w).float(), th(dy).float()
            tb = th(b).float() if has_bias else None
            ref = {"forward": tx @ tw.T + (tb if has_bias else 0), "dx": tdy @ tw, "dW": tdy.T @ tx}
            g0 = randn((M, K))
            ref["dW"] += th(g0).float()
            ref_db = tdy.sum(0)
            flops = 2 * N * K * M
            outs = {"forward": cp.empty((N, M), bf), "dx": cp.empty((N, K), bf), "dW": cp.empty((M, K), bf)}

            # cuBLAS, same process
            bx, bw, bdy = th(x), th(w), th(dy)
            bbias = th(b) if has_bias else None
            bdw = torch.zeros_like(bw)
            bdb = torch.zeros(M, dtype=torch.bfloat16, device="cuda") if has_bias else None
            cub = {"forward": (lambda i: torch.addmm(bbias, bx, bw.T)) if has_bias else (lambda i: bx @ bw.T),
                   "dx": lambda i: bdy @ bw, "dW": lambda i: bdw.addmm_(bdy.T, bx)}
            for p in PRODUCTS:
                record(kind="matmul", N=N, linear=name, product=p, impl="cublas", seconds=timer(cub[p]),
                       flops=flops)
            if has_bias and not final:  # db alone (the sweep's backward = best dx + best dW + this)
                db = cp.zeros((M,), bf)
                record(kind="matmul", N=N, linear=name, product="db", impl="colsum", flops=0,
                       seconds=timer(lambda i: _reduce.colsum_into(dy, db, cp)))

            def cub_bwd(i):
                bdy @ bw
                bdw.addmm_(bdy.T, bx)
                if has_bias:
                    bdb.add_(bdy.sum(0))
            record(kind="matmul", N=N, linear=name, product="backward", impl="cublas", seconds=timer(cub_bwd),
                   flops=2 * flops)
            if final:
                record(kind="matmul", N=N, linear=name, product="forward", impl="cublas-wall",
                       seconds=timer(cub["forward"], hide_launch=False), flops=flops)
                record(kind="matmul", N=N, linear=name, product="backward", impl="cublas-wall",
                       seconds=timer(cub_bwd, hide_launch=False), flops=2 * flops)

            cands = MM_CANDIDATES if not final else {"default": None, **FINAL_DW}
            for cname, cfg in cands.items():
                for p in PRODUCTS:
                    if (cname in NOSPLIT_ONLY_DW or cname in FINAL_DW) and p != "dW":
                        continue
                    if cname == "default":  # the product's own choice (CONFIGS, SHAPE_CONFIGS)
                        cfg = matmul._config("bfloat16", p, (M, K))
                    try:
                        o = outs[p]
                        if p == "dW":
                            cp.copyto(o, g0)
                        else:
                            o.fill(cp.nan)
                        mm_call(p, x, w, b, dy, o, cfg)
                        err = rel_err(th(o), ref[p])
                        ok = err < 2e-2
                        sec = timer(lambda i: mm_call(p, x, w, b, dy, o, cfg)) if ok else None
                        record(kind="matmul", N=N, linear=name, product=p, impl=cname, seconds=sec, err=err,
                               ok=ok, flops=flops)
                    except Exception as exc:
                        record(kind="matmul", N=N, linear=name, product=p, impl=cname, seconds=None,
                               ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            if final:  # the product entry points, as training calls them
                inputs = {"x": x, "weight": w, "bias": b}
                y, saved = matmul.forward(inputs, {})
                grads = {"weight": cp.copy(g0), "x": cp.empty((N, K), bf)}
                if has_bias:
                    grads["bias"] = cp.zeros((M,), bf)
                res = matmul.backward(saved, dy, grads)
                errs = [rel_err(th(y), ref["forward"]), rel_err(th(res["x"]), ref["dx"]),
                        rel_err(th(res["weight"]), ref["dW"])]
                if has_bias:
                    errs.append(rel_err(th(res["bias"]), ref_db))
                record(kind="matmul", N=N, linear=name, product="check", impl="product", err=max(errs),
                       ok=max(errs) < 2e-2)
                for mode, hide in (("product", True), ("product-wall", False)):
                    record(kind="matmul", N=N, linear=name, product="forward", impl=mode, flops=flops,
                           seconds=timer(lambda i: matmul.forward(inputs, {}, out=outs["forward"]), hide))
                    record(kind="matmul", N=N, linear=name, product="backward", impl=mode, flops=2 * flops,
                           seconds=timer(lambda i: matmul.backward(saved, dy, grads), hide))
            cp.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()

    # ---- layernorm: 4 sets of buffers in rotation (more than the L2) ----
    R = 4
    for N in sizes:
        xs = [randn((N, C), 2.0) for _ in range(R)]
        dys = [randn((N, C)) for _ in range(R)]
        wv, bv = randn((C,), 0.5, 1.0), randn((C,), 0.5)
        ys = [cp.empty((N, C), bf) for _ in range(R)]
        dxs = [cp.empty((N, C), bf) for _ in range(R)]
        nbytes = N * C * 2
        fwd_bytes, bwd_bytes = 2 * nbytes + 8 * N, 3 * nbytes + 8 * N
        # reference, float32 on the upcast inputs
        tx = th(xs[0]).float().requires_grad_(True)
        tw, tbias = th(wv).float().requires_grad_(True), th(bv).float().requires_grad_(True)
        ty = torch.nn.functional.layer_norm(tx, (C,), tw, tbias, 1e-5)
        rdx, rdw, rdb = torch.autograd.grad(ty, (tx, tw, tbias), th(dys[0]).float())
        ref_y = ty.detach()
        # torch, same process: bf16 tensors
        txs = [th(a).requires_grad_(True) for a in xs]
        tws, tbs = th(wv).clone().requires_grad_(True), th(bv).clone().requires_grad_(True)
        tys = [torch.nn.functional.layer_norm(a, (C,), tws, tbs, 1e-5) for a in txs]
        tdys = [th(a) for a in dys]
        t_f = lambda i: torch.nn.functional.layer_norm(txs[i % R], (C,), tws, tbs, 1e-5)  # noqa: E731
        t_b = lambda i: torch.autograd.grad(tys[i % R], (txs[i % R], tws, tbs), tdys[i % R],  # noqa: E731
                                            retain_graph=True)
        modes = (("", True), ("-wall", False)) if final else (("", True),)
        for suffix, hide in modes:
            record(kind="layernorm", N=N, direction="forward", impl="torch" + suffix, seconds=timer(t_f, hide),
                   bytes=fwd_bytes)
            record(kind="layernorm", N=N, direction="backward", impl="torch" + suffix,
                   seconds=timer(t_b, hide), bytes=bwd_bytes)
        fwd_cands = LN_FWD if not final else {"default": None}
        bwd_cands = LN_BWD if not final else {"default": None}
        attrs = {"eps": 1e-5}
        for cname, cfg in fwd_cands.items():
            for suffix, hide in (modes if cname == "default" else (("", True),)):
                try:
                    ys[0].fill(cp.nan)
                    y, saved = layernorm.forward({"x": xs[0], "weight": wv, "bias": bv}, attrs, out=ys[0],
                                                 config=cfg)
                    err = rel_err(th(y), ref_y)
                    ok = err < 2e-2
                    sec = timer(lambda i: layernorm.forward({"x": xs[i % R], "weight": wv, "bias": bv}, attrs,
                                                            out=ys[i % R], config=cfg), hide) if ok else None
                    record(kind="layernorm", N=N, direction="forward", impl=cname + suffix, seconds=sec, err=err,
                           ok=ok, bytes=fwd_bytes)
                except Exception as exc:
                    record(kind="layernorm", N=N, direction="forward", impl=cname, ok=False, seconds=None,
                           error=f"{type(exc).__name__}: {str(exc)[:300]}")
        saves = [layernorm.forward({"x": a, "weight": wv, "bias": bv}, attrs)[1] for a in xs]
        g0w, g0b = randn((C,)), randn((C,))
        for cname, cfg in bwd_cands.items():
            for suffix, hide in (modes if cname == "default" else (("", True),)):
                try:
                    dxs[0].fill(cp.nan)
                    gw, gb = cp.copy(g0w), cp.copy(g0b)
                    layernorm.backward(saves[0], dys[0], {"x": dxs[0], "weight": gw, "bias": gb}, config=cfg)
                    err = max(rel_err(th(dxs[0]), rdx), rel_err(th(gw), rdw + th(g0w).float()),
                              rel_err(th(gb), rdb + th(g0b).float()))
                    ok = err < 2e-2
                    sec = timer(lambda i: layernorm.backward(saves[i % R], dys[i % R],
                                                             {"x": dxs[i % R], "weight": gw, "bias": gb},
                                                             config=cfg), hide) if ok else None
                    record(kind="layernorm", N=N, direction="backward", impl=cname + suffix, seconds=sec,
                           err=err, ok=ok, bytes=bwd_bytes)
                except Exception as exc:
                    record(kind="layernorm", N=N, direction="backward", impl=cname, ok=False, seconds=None,
                           error=f"{type(exc).__name__}: {str(exc)[:300]}")
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()

    return records, peak_bw


def table(records, peak_bw, log):
    """Best candidate per (N, linear, product) beside cuBLAS; layernorm beside torch and the bandwidth."""
    best = {}
    for r in records:
        if r.get("kind") == "matmul" and r.get("seconds") and r["impl"] not in ("cublas", "cublas-wall"):
            key = (r["N"], r["linear"], r["product"], r["impl"].endswith("-wall"))
            if key not in best or r["seconds"] < best[key]["seconds"]:
                best[key] = r
    cub = {(r["N"], r["linear"], r["product"], r["impl"] == "cublas-wall"): r["seconds"]
           for r in records if r.get("kind") == "matmul" and r["impl"] in ("cublas", "cublas-wall")}
    log("\n| N | linear | product | best triton | ms | TFLOP/s | cuBLAS ms | vs cuBLAS |")
    log("|---|---|---|---|---|---|---|---|")
    for key, r in sorted(best.items()):
        c = cub.get(key)
        if c:
            log(f"| {key[0]} | {key[1]} | {key[2]}{' (wall)' if key[3] else ''} | {r['impl']} | "
                f"{r['seconds'] * 1e3:.4f} | {r['flops'] / r['seconds'] / 1e12:.0f} | "
                f"{c * 1e3:.4f} | {c / r['seconds']:.2f}x |")
    log(f"\n| N | op | direction | impl | ms | GB/s | % of copy {peak_bw / 1e9:.0f} GB/s | torch ms | vs torch |")
    log("|---|---|---|---|---|---|---|---|---|")
    ln = [r for r in records if r.get("kind") == "layernorm" and r.get("seconds")]
    for r in sorted(ln, key=lambda r: (r["kind"], r["N"], r["direction"], r["seconds"])):
        if r["impl"].startswith("torch"):
            continue
        wall = r["impl"].endswith("-wall")
        t = [q["seconds"] for q in ln if q["N"] == r["N"] and q["direction"] == r["direction"]
             and q["kind"] == r["kind"] and q["impl"] == ("torch-wall" if wall else "torch")]
        bw = r["bytes"] / r["seconds"]
        log(f"| {r['N']} | {r['kind']} | {r['direction']} | {r['impl']} | {r['seconds'] * 1e3:.4f} | {bw / 1e9:.0f} | "
            f"{100 * bw / peak_bw:.0f}% | {t[0] * 1e3 if t else float('nan'):.4f} | "
            f"{(t[0] / r['seconds']) if t else float('nan'):.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=("sweep", "final"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--no-precompile", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, f"{args.stage}.log"), "w")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    env = {"git_sha": os.environ.get("GIT_SHA", "unknown"), "python": sys.version.split()[0],
           "torch": torch.__version__, "triton": _runtime.triton.__version__, "numpy": np.__version__}
    try:
        env["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                     "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    if not args.no_precompile:
        precompile(args.stage, log)
    import cupy
    env["cupy"] = cupy.__version__
    log(json.dumps(env))
    t0 = time.time()
    records, peak_bw = run(args.stage, args.out, log)
    log(f"measured in {time.time() - t0:.0f} s")
    with open(os.path.join(args.out, f"{args.stage}.json"), "w") as f:
        json.dump({"env": env, "peak_copy_bytes_per_s": peak_bw, "records": records}, f, indent=1)
    table(records, peak_bw, log)


if __name__ == "__main__":
    main()
