"""cupy_raw layernorm (C = 768, bf16, float32 dweight/dbias) at a few Launch tables: check, then time.

    python3 bench/tune/cupy_raw_layernorm_sweep.py --out $OUT/ln.json   # on the GPU (~40 s)
    python3 bench/tune/cupy_raw_layernorm_sweep.py --check-cpu          # every candidate in the CPU emulator

Each candidate is the product's kernel run through its one entry for a launch table,
`layernorm.forward(..., launch=Launch(...))` / `layernorm.backward(..., launch=...)`: forward rows per
warp and warps per block; backward ring stages and warps per block; the finish's threads per column.
Before it is timed it is checked against float64 on the very arrays it is timed on (set 0): y, mean,
rstd, dx poisoned with NaN, dweight/dbias pre-filled and accumulated into. Beside them, in the same
process: cupy copyto of the forward's bytes (the bound the op's "% of copy" is read against) and the
op spec's byte counts (euler_core/ops/layernorm.py). GPU time: euler_core.measure.timing (batches
behind its spin kernel, CUDA events, medians; 4 rotating input sets, more than the 50 MB L2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from backends.cupy_raw import _runtime as rt  # noqa: E402
from backends.cupy_raw import layernorm  # noqa: E402
from backends.cupy_raw.layernorm import LAUNCH, Launch  # noqa: E402

C, EPS = 768, 1e-5
FORWARD = {"product": LAUNCH, **{f"rows{r}w{w}": dataclasses.replace(LAUNCH, forward_rows=r, forward_warps=w)
                                 for r, w in [(1, 4), (2, 4), (8, 4), (2, 8), (4, 8)]}}
BACKWARD = {"product": LAUNCH, **{f"stages{s}w{w}": dataclasses.replace(LAUNCH, backward_stages=s, backward_warps=w)
                                  for s, w in [(2, 8), (4, 8), (3, 4), (6, 4)]},
            "finish32": dataclasses.replace(LAUNCH, finish_split=32)}


def reference(x, w, b, dy, dw0, db0):
    """float64: y, mean, rstd, dx, dweight, dbias (the last two with the buffers' earlier sums)."""
    x, w, b, dy = (np.asarray(a, np.float64) for a in (x, w, b, dy))
    mean = x.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + EPS)
    xh = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - g.mean(1, keepdims=True) - xh * (g * xh).mean(1, keepdims=True))
    return xh * w + b, mean[:, 0], rstd[:, 0], dx, dw0 + (dy * xh).sum(0), db0 + dy.sum(0)


def relerr(a, ref, xp):
    a = xp.asarray(a).astype(xp.float64)
    if not bool(xp.isfinite(a).all()):
        return float("inf")
    return float(xp.abs(a - ref).max() / xp.abs(ref).max())


def sets(N, n_sets, xp, bf, rng):
    def rand(shape, scale=1.0, shift=0.0):
        return xp.asarray((rng.standard_normal(shape) * scale + shift).astype(np.float32)).astype(bf)
    w, b = rand((C,), 0.5, 1.0), rand((C,), 0.5)
    return w, b, [dict(x=rand((N, C), 2.0, 0.3), dy=rand((N, C)), y=xp.empty((N, C), bf), dx=xp.empty((N, C), bf),
                       dw=xp.zeros((C,), np.float32), db=xp.zeros((C,), np.float32)) for _ in range(n_sets)]


def check(N, xp, bf, rng, log):
    """Every candidate against float64 on set 0; returns {name: error} (forward and backward)."""
    w, b, (s,) = sets(N, 1, xp, bf, rng)
    dw0, db0 = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    y64, m64, r64, dx64, dw64, db64 = (xp.asarray(a) for a in reference(
        *(xp.asnumpy(a) if xp is not np else a for a in (s["x"], w, b, s["dy"])), dw0, db0))
    errs = {}
    for name, cfg in FORWARD.items():
        s["y"][...] = np.nan
        y, st = layernorm.forward({"x": s["x"], "weight": w, "bias": b}, {"eps": EPS}, out=s["y"], launch=cfg)
        errs["forward " + name] = max(relerr(y, y64, xp), relerr(st.mean, m64, xp), relerr(st.rstd, r64, xp))
    saved = layernorm.forward({"x": s["x"], "weight": w, "bias": b}, {"eps": EPS})[1]
    for name, cfg in BACKWARD.items():
        s["dx"][...] = np.nan
        s["dw"][...], s["db"][...] = xp.asarray(dw0), xp.asarray(db0)
        g = layernorm.backward(saved, s["dy"], {"x": s["dx"], "weight": s["dw"], "bias": s["db"]}, launch=cfg)
        errs["backward " + name] = max(relerr(g["x"], dx64, xp), relerr(g["weight"], dw64, xp),
                                       relerr(g["bias"], db64, xp))
    for k, e in errs.items():
        log(f"N={N} check {k}: max relative error {e:.2e}")
    return errs


def run(out_path):
    import cupy as cp
    import ml_dtypes
    from euler_core.measure.timing import CudaTimer, TimingConfig, measure

    t0, bf, rng = time.time(), ml_dtypes.bfloat16, np.random.default_rng(1)
    timer = CudaTimer()
    tcfg = TimingConfig(warmup_s=0.02, warmup_calls=2, sample_s=1.5e-3, min_samples=7, max_samples=15,
                        min_time_s=0.06, max_time_s=0.5)
    records = []

    def log(msg):
        print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)

    for N in (16384, 32768):
        errs = check(N, cp, bf, rng, log)
        fbytes = 2 * N * C * 2 + 2 * C * 2 + 2 * N * 4  # the op spec's counts (euler_core/ops/layernorm.py)
        bbytes = 3 * N * C * 2 + 3 * 2 * C * 2 + 2 * N * 4
        S = 4
        w, b, ss = sets(N, S, cp, bf, rng)
        cp.cuda.Device().synchronize()
        a, c = [cp.empty((N * C,), cp.int16) for _ in range(S)], [cp.empty((N * C,), cp.int16) for _ in range(S)]
        copy_us = measure(lambda i: cp.copyto(c[i], a[i]), S, timer, tcfg).p50 * 1e6
        del a, c
        records.append(dict(N=N, direction="forward", impl="cupy-copy", us=round(copy_us, 2), bytes=4 * N * C))
        log(f"N={N} cupy copyto of the forward's bytes: {copy_us:.2f} us")
        saves = [layernorm.forward({"x": s["x"], "weight": w, "bias": b}, {"eps": EPS})[1] for s in ss]
        for direction, table in (("forward", FORWARD), ("backward", BACKWARD)):
            for name, cfg in table.items():
                err = errs[f"{direction} {name}"]
                rec = dict(N=N, direction=direction, impl=name, launch=dataclasses.asdict(cfg), err=err)
                if err < 2e-2:
                    if direction == "forward":
                        def call(i, cfg=cfg):
                            layernorm.forward({"x": ss[i]["x"], "weight": w, "bias": b}, {"eps": EPS}, out=ss[i]["y"],
                                              launch=cfg)
                    else:
                        def call(i, cfg=cfg):
                            layernorm.backward(saves[i], ss[i]["dy"], {"x": ss[i]["dx"], "weight": ss[i]["dw"],
                                                                       "bias": ss[i]["db"]}, launch=cfg)
                    us = measure(call, S, timer, tcfg).p50 * 1e6
                    nbytes = fbytes if direction == "forward" else bbytes
                    rec.update(us=round(us, 2), bytes=nbytes, gbps=round(nbytes / us / 1e3, 1),
                               vs_copy_rate=round(copy_us / (4 * N * C) * nbytes / us, 3))
                records.append(rec)
                log(" ".join(f"{k}={v}" for k, v in rec.items() if k != "launch"))
                if out_path:
                    with open(out_path, "w") as f:
                        json.dump(records, f, indent=1)
        del ss, saves
        cp.get_default_memory_pool().free_all_blocks()
    print("\n| N | direction | launch | us | GB/s | x copyto's rate |\n|---|---|---|---:|---:|---:|")
    for r in records:
        if "us" in r and r["impl"] != "cupy-copy":
            print(f"| {r['N']} | {r['direction']} | {r['impl']} | {r['us']} | {r['gbps']} | {r['vs_copy_rate']} |")


def check_cpu():
    import ml_dtypes
    failed = []
    with rt.emulation():
        for N in (37, 300):
            errs = check(N, np, ml_dtypes.bfloat16, np.random.default_rng(0), print)
            failed += [k for k, e in errs.items() if not e < 2e-2]
    print("cpu check:", "failed " + ", ".join(failed) if failed else "every candidate passed")
    return not failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check-cpu", action="store_true", help="every candidate in the CPU emulator, small N")
    args = ap.parse_args()
    if args.check_cpu:
        sys.exit(0 if check_cpu() else 1)
    run(args.out)


if __name__ == "__main__":
    main()
