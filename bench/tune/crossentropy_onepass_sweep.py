"""crossentropy_onepass on the H200: checked, then timed against the unfused pair, at GPT-2's loss.

    python3 bench/tune/crossentropy_onepass_sweep.py --out OUT.json [--rows 65536,16384]   (GPU)
        [--unrolls 2,4,8] [--no-triton] [--label NAME]

For each row count (B*T; V = 50304, n_valid = 50257, bf16 logits of scale 3, a tenth of the targets
-1): the unfused pair (crossentropy.py's forward, then its backward: one read, then a read and a
write) and backends/triton/crossentropy_onepass.py at each OnePassConfig below, and
backends/cupy_raw/crossentropy_onepass.py (the row kept in shared memory: one read of the logits). Each candidate's
outputs are poisoned (NaN) first and checked: the losses and dlogits of 64 rows spread over the
batch against float64 on the GPU (CuPy), and everything against the unfused pair (same bf16
rounding, a few ulps apart where the lanes' order of summation differs). Then the median of 15
timed calls between CUDA events, and the bytes of one read and one write of the logits over that
time against the device's copy bandwidth (a 2 GB device-to-device copy, timed the same way).
"""

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

V, N_VALID = 50304, 50257
CONFIGS = [(8192, 32, 2), (8192, 32, 1), (8192, 16, 2), (4096, 16, 2), (4096, 8, 2), (2048, 4, 2)]


def timed(fn, reps=15):
    import cupy
    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    return statistics.median(times)


def reference(logits, targets, dlosses, rows):
    """losses and dlogits of `rows` in float64 on the GPU."""
    import cupy
    z = logits[rows].astype(cupy.float64)[:, :N_VALID]
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + cupy.log(cupy.exp(z - m).sum(axis=1))
    t = targets[rows]
    valid = t >= 0
    picked = z[cupy.arange(len(rows)), cupy.where(valid, t, 0)]
    losses = cupy.where(valid, lse - picked, 0.0)
    p = cupy.exp(z - lse[:, None])
    p[cupy.arange(len(rows)), cupy.where(valid, t, 0)] -= valid
    d = cupy.zeros((len(rows), V))
    d[:, :N_VALID] = p * cupy.where(valid, dlosses[rows], 0.0)[:, None]
    return losses, d


def main(argv=None):
    import cupy

    from backends.cupy_raw import crossentropy_onepass as staged
    from backends.triton import crossentropy, crossentropy_onepass as onepass
    from euler_core.device import storage_dtype
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rows", default="65536,16384")
    p.add_argument("--unrolls", default=None,
                   help="comma-separated UNROLL values for cupy_raw's kernel (packs a group; default: the module's)")
    p.add_argument("--no-triton", action="store_true", help="leave triton's configurations out (cupy_raw only)")
    p.add_argument("--label", default="", help="appended to cupy_raw's candidate names (a source under test)")
    args = p.parse_args(argv)
    unrolls = [int(u) for u in args.unrolls.split(",")] if args.unrolls else [getattr(staged, "UNROLL", None)]
    records = []
    src = cupy.empty(2**30, dtype=cupy.uint16)
    dst = cupy.empty_like(src)
    copy_s = timed(lambda: dst.__setitem__(Ellipsis, src))
    copy_bw = 2 * src.nbytes / copy_s
    print(f"copy: {copy_bw / 1e9:,.0f} GB/s", flush=True)
    del src, dst
    for n in [int(r) for r in args.rows.split(",")]:
        rng = cupy.random.default_rng(n)
        logits = (3.0 * rng.standard_normal((1, n, V), dtype=cupy.float32)).astype(storage_dtype("bfloat16"))
        targets = rng.integers(0, N_VALID, (1, n), dtype=cupy.int32)
        targets[rng.random((1, n)) < 0.1] = -1
        dlosses = (rng.random((1, n), dtype=cupy.float32) + 0.5) / n
        rows = cupy.linspace(0, n - 1, 64).astype(cupy.int64)
        ref_losses, ref_d = reference(logits[0], targets[0], dlosses[0], rows)
        attrs = {"n_valid": N_VALID}
        losses_u = cupy.full((1, n), cupy.nan, dtype=cupy.float32)
        dlogits_u = cupy.full_like(logits, cupy.nan)

        def unfused():
            _, saved = crossentropy.forward({"logits": logits, "targets": targets}, attrs, out=losses_u)
            crossentropy.backward(saved, dlosses, {"logits": dlogits_u})
        t_unfused = timed(unfused)
        records.append({"rows": n, "candidate": "unfused forward + backward", "s": t_unfused})
        print(f"rows {n}: unfused {t_unfused * 1e6:,.0f} us", flush=True)
        inputs = {"logits": logits, "targets": targets, "dlosses": dlosses}
        candidates = [] if args.no_triton else [
            (f"onepass b{b}-w{w}-s{st}",
             lambda out, cfg=onepass.OnePassConfig(b, w, st): onepass.forward_with(cfg, inputs, attrs, out=out))
            for b, w, st in CONFIGS]

        def cupy_raw(out, unroll):
            if unroll is not None:
                staged.UNROLL = unroll  # the kernel's define: compiled once per value
            return staged.forward(inputs, attrs, out=out)
        candidates += [(f"cupy_raw staged{args.label}" + (f" u{u}" if args.unrolls else ""),
                        lambda out, u=u: cupy_raw(out, u)) for u in unrolls]
        for name, forward in candidates:
            losses = cupy.full((1, n), cupy.nan, dtype=cupy.float32)
            _, saved = forward(losses)
            d = saved.dlogits
            err_loss = float(cupy.abs(losses[0][rows] - ref_losses).max())
            err_d = float(cupy.abs(d[0][rows].astype(cupy.float64) - ref_d).max() / cupy.abs(ref_d).max())
            same_losses = float(cupy.abs(losses - losses_u).max())
            diff_d = float(cupy.abs(d.astype(cupy.float32) - dlogits_u.astype(cupy.float32)).max()
                           / cupy.abs(dlogits_u.astype(cupy.float32)).max())
            finite = bool(cupy.isfinite(losses).all()) and bool(cupy.isfinite(d.astype(cupy.float32)).all())
            ok = finite and err_loss < 1e-3 and err_d < 2e-2 and diff_d < 2e-2
            del d, saved
            s = timed(lambda: forward(losses)) if ok else None
            rec = {"rows": n, "candidate": name, "ok": ok, "finite": finite,
                   "loss_abs_err_vs_f64": err_loss, "dlogits_rel_err_vs_f64": err_d,
                   "loss_diff_vs_unfused": same_losses, "dlogits_rel_diff_vs_unfused": diff_d, "s": s,
                   "speedup_vs_unfused": t_unfused / s if s else None,
                   "copy_fraction": 2 * logits.nbytes / s / copy_bw if s else None}
            records.append(rec)
            print(json.dumps(rec), flush=True)
        del logits, dlogits_u
        cupy.get_default_memory_pool().free_all_blocks()
    Path(args.out).write_text(json.dumps({"copy_bw": copy_bw, "records": records}, indent=1))


if __name__ == "__main__":
    main()
