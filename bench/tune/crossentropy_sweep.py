"""Crossentropy forward on the H200: why 66% of bandwidth, and what reaches 80%. Check, then time.

    python3 bench/tune/crossentropy_sweep.py --out OUT.json          (GPU)
    python3 bench/tune/crossentropy_sweep.py --compile               (here: every config compiled for sm_90)
    TRITON_INTERPRET=1 python3 bench/tune/crossentropy_sweep.py --interpret   (here: tiny shapes)

Candidates, all one program per row with per-lane running (max, sum):
- `product`: backends/triton/crossentropy.py as it is. In the committed run
  (reports/triton-h200/crossentropy-sweep.*) that was the kernel before this sweep: every chunk's loads
  masked by `cols < n_valid`; n_valid = 50257 is odd, so Triton could not prove 8 neighbouring lanes
  share a mask value: 2-byte loads. The sweep's winner, split-b2048-w4-s2, is the product since.
- `split`: the chunks wholly below n_valid unmasked (16-byte loads), then one masked tail chunk (the
  product kernel since), at BLOCK_V x num_warps x the loop's num_stages (tl.range pipelining of the
  loads). The committed run also had three `-evict` rows, the same kernels with
  eviction_policy="evict_first" on the unmasked loads: no faster (526 -> 528, 565 -> 571, 502 -> 502
  us at 16384 rows), so that switch is not kept.
Also timed: a read-only pass over the same logits (sum of a bf16 row: the achievable read bandwidth of
this access pattern), a device copy of the same bytes, and torch.nn.functional.cross_entropy.
"""

import argparse
import json
import sys
import time

import numpy as np

try:
    import torch  # before backends.triton (its runtime blocks a later torch import)
except ImportError:
    torch = None

from backends.triton import _runtime, crossentropy
from backends.triton._runtime import kernel, launch, tl

V, N_VALID = 50304, 50257


@kernel
def _row_sum(logits_ptr, out_ptr, V, BLOCK_V: tl.constexpr):
    """Read-only reference: each program sums its row (the same bytes as the forward reads)."""
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * V
    acc = tl.zeros((BLOCK_V,), dtype=tl.float32)
    lanes = tl.arange(0, BLOCK_V)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + lanes
        acc += tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


#: (BLOCK_V, num_warps, loop stages) for the product kernel
SPLIT_CONFIGS = [
    (2048, 4, 1), (2048, 8, 1), (4096, 4, 1), (4096, 8, 1), (4096, 16, 1), (8192, 8, 1), (8192, 16, 1),
    (2048, 4, 2), (2048, 8, 2), (4096, 8, 2), (4096, 16, 2), (2048, 4, 3), (4096, 8, 3), (8192, 16, 2)]


def candidates():
    """name -> function(logits, targets, losses, lse) running one forward."""
    out = {"product": lambda lg, tg, lo, ls: crossentropy.forward(
        {"logits": lg, "targets": tg}, {"n_valid": N_VALID}, out=lo)}
    for bv, w, st in SPLIT_CONFIGS:
        def run(lg, tg, lo, ls, bv=bv, w=w, st=st):
            B, T, Vp = lg.shape
            launch(crossentropy._ce_forward, (B * T,), lg, tg, lo, ls, Vp, N_VALID, BLOCK_V=bv, STAGES=st,
                   num_warps=w)
        out[f"split-b{bv}-w{w}-s{st}"] = run
    return out


def reference(logits: np.ndarray, targets: np.ndarray):
    z = logits.astype(np.float64)[..., :N_VALID]
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(z, np.maximum(targets, 0)[..., None].astype(np.int64), -1)[..., 0]
    return np.where(targets >= 0, lse - picked, 0.0), lse


def make_inputs(rng, B, T, dtype):
    import ml_dtypes
    rows = min(B * T, 1024)  # large inputs repeat 1024 random rows (generating 33M normals is slow)
    block = (rng.standard_normal((rows, V), dtype=np.float32) * 3.0).astype(
        ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    logits = np.tile(block, (B * T // rows, 1)).reshape(B, T, V)
    targets = rng.integers(0, N_VALID, size=(B, T)).astype(np.int32)
    targets[rng.random((B, T)) < 0.2] = -1
    return logits, targets


def check(name, fn, xp, to_dev, rng, B=2, T=64):
    logits, targets = make_inputs(rng, B, T, "bfloat16")
    lg, tg = to_dev(logits), to_dev(targets)
    lo = to_dev(np.full((B, T), np.nan, np.float32))
    ls = to_dev(np.full((B * T,), np.nan, np.float32))
    res = fn(lg, tg, lo, ls)
    if name == "product":
        lo, ls = res[0], res[1].lse
    got_loss = np.asarray(lo.get() if hasattr(lo, "get") else lo, np.float64)
    got_lse = np.asarray(ls.get() if hasattr(ls, "get") else ls, np.float64).reshape(B, T)
    want_loss, want_lse = reference(logits, targets)
    err = max(np.abs(got_loss - want_loss).max(), np.abs(got_lse - want_lse).max())
    if not np.isfinite(err) or err > 1e-3:
        raise AssertionError(f"{name}: max error {err} against float64")
    return float(err)


def compile_all():
    """Every candidate launch compiled for sm_90 (no GPU)."""
    rng = np.random.default_rng(0)
    logits, targets = make_inputs(rng, 1, 4, "bfloat16")
    lo, ls = np.zeros((1, 4), np.float32), np.zeros(4, np.float32)
    for name, fn in candidates().items():
        with _runtime.recording() as rec:
            fn(logits, targets, lo, ls)
        for entry in rec:
            t0 = time.time()
            compiled = _runtime.compile_recorded(entry)
            print(f"{name}: compiled in {time.time() - t0:.1f}s, shared {compiled.metadata.shared} B, "
                  f"regs {getattr(compiled, 'n_regs', '?')}", flush=True)


def interpret_all():
    rng = np.random.default_rng(1)
    with _runtime.interpreter():
        for name, fn in candidates().items():
            if "b8192" in name:
                continue
            err = check(name, fn, np, lambda a: a, rng, B=1, T=2)
            print(f"{name}: ok under the interpreter, max error {err:.2e}", flush=True)


def gpu(out_path: str):
    import cupy
    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    from euler_core.device import to_device
    rng = np.random.default_rng(2)
    timer = CudaTimer()
    cfg = TimingConfig(min_time_s=0.15, max_time_s=2.0, min_samples=5, max_samples=20)
    results = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
               "triton": _runtime.triton.__version__, "cupy": cupy.__version__,
               "torch": getattr(torch, "__version__", None), "checks": {}, "times": []}

    def save():
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)

    to_dev = lambda a: to_device(a, "cuda")  # noqa: E731
    cands = candidates()
    for name, fn in list(cands.items()):
        try:
            results["checks"][name] = check(name, fn, cupy, to_dev, rng)
        except Exception as e:  # a failed candidate is reported and dropped, never timed
            results["checks"][name] = f"FAILED: {e}"
            cands.pop(name)
        print(name, results["checks"][name], flush=True)
    save()
    for B in (16, 32):
        T = 1024
        logits, targets = make_inputs(rng, B, T, "bfloat16")
        lg, tg = to_dev(logits), to_dev(targets)
        del logits
        lo = cupy.empty((B, T), np.float32)
        ls = cupy.empty((B * T,), np.float32)
        nbytes = lg.nbytes + tg.nbytes + B * T * 4

        def timed(name, call, moved=nbytes):
            t = measure(lambda i: call(), 1, timer, cfg)
            gbps = moved / t.p50 / 1e9
            results["times"].append({"B": B, "name": name, "p50_s": t.p50, "p20_s": t.p20, "p80_s": t.p80,
                                     "GBps": gbps, "pct_4250": gbps / 4250 * 100})
            print(f"B={B} {name:28s} {t.p50 * 1e6:8.1f} us  {gbps:7.0f} GB/s  {gbps / 42.5:5.1f}%", flush=True)
            save()

        dst = cupy.empty_like(lg)
        timed("copy (read + write)", lambda: dst.__setitem__(Ellipsis, lg), moved=2 * lg.nbytes)
        del dst
        sums = cupy.empty((B * T,), np.float32)
        for bv, w in ((4096, 8), (8192, 16)):
            timed(f"read-only row sum b{bv} w{w}",
                  lambda bv=bv, w=w: launch(_row_sum, (B * T,), lg, sums, V, BLOCK_V=bv, num_warps=w))
        for name, fn in cands.items():
            timed(name, lambda fn=fn: fn(lg, tg, lo, ls))
        if torch is not None:
            tl_ = torch.from_dlpack(lg).view(B * T, V)[:, :N_VALID]
            tt = torch.from_dlpack(tg).view(-1).long()
            timed("torch cross_entropy (reduction none)",
                  lambda: torch.nn.functional.cross_entropy(tl_, tt, ignore_index=-1, reduction="none"))
        del lg
        cupy.get_default_memory_pool().free_all_blocks()
    save()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--interpret", action="store_true")
    a = p.parse_args()
    if a.compile:
        compile_all()
    elif a.interpret:
        interpret_all()
    else:
        gpu(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
